// compiled_kernel_launch.h — running kernels that torch.compile generated for openreg.
//
// Inductor compiles each fused openreg kernel with its CPU C++ code generator
// into a shared library. The generated source also gets an entry point of one
// uniform signature (see torch_openreg/_inductor/kernels.py):
//     const char* entry(const uint64_t* words)
// — each argument one 64-bit word (a pointer, an int64, or a double's bits),
// the result the message of an exception the kernel threw, or null. So one
// launcher runs kernels of any signature, without a Python binding per kernel.
//
// A launch translates every device pointer to its kernel-view address and
// enqueues the call on the current stream of the arguments' device
// (launchOnDevice, with the tensors it reads and writes): the host returns at once, no copy is
// made, memory protection is never touched, and the kernel runs in order with eager work on that
// stream. Like an eager kernel, queued work holds addresses, not tensors: device memory keeps the
// caller's lifetime and stream-ordered reuse (block_pool.h) makes a buffer freed after the launch
// safe. Host tensors, which have no such ordering, are snapshotted at launch. A failure inside the
// kernel becomes the stream's error and surfaces at the next synchronizing
// call, as for eager kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch_openreg {

// What one argument of a compiled kernel is, as Inductor declares it.
enum class CompiledArgumentKind : char {
  ReadPointer = 'r',   // `const T*`: a tensor the kernel reads
  WritePointer = 'w',  // `T*`: a tensor the kernel writes
  Integer = 'i',       // `int64_t`: a size or index
  Float = 'f',         // `float`: a data-dependent float scalar
};

// One compiled kernel: its entry point and argument kinds. Immutable; shared
// with queued launches, which may outlive the Python object.
class CompiledKernel {
 public:
  using Entry = const char* (*)(const uint64_t* words);

  // `kinds` holds one CompiledArgumentKind character per argument.
  CompiledKernel(std::string name, Entry entry, std::string kinds);

  const std::string& name() const { return name_; }
  // How a launch of it is named in race reports.
  const std::string& launchName() const { return launchName_; }
  const std::string& kinds() const { return kinds_; }
  Entry entry() const { return entry_; }

 private:
  std::string name_;
  std::string launchName_;
  Entry entry_;
  std::string kinds_;
};

// The arguments of one launch, gathered on the host.
class CompiledLaunchArguments {
 public:
  explicit CompiledLaunchArguments(std::shared_ptr<const CompiledKernel> kernel)
      : kernel_(std::move(kernel)) {}

  void addTensor(const at::Tensor& tensor);
  void addInteger(int64_t value);
  void addFloat(double value);

  // Enqueues the kernel on the current stream of the arguments' device (the
  // current device if no argument is an openreg tensor) and returns.
  void launch() &&;

 private:
  std::shared_ptr<const CompiledKernel> kernel_;
  c10::DeviceIndex device_ = -1;
  c10::SmallVector<uint64_t, 8> words_;
  c10::SmallVector<at::Tensor, 1> hostTensors_;
  // The device tensors by kind, for the race detector (only in that mode).
  std::vector<at::Tensor> reads_, writes_;
};

// Adds the `_CompiledKernel` class and `_current_raw_stream` to module `_C`.
void registerCompiledKernelBindings(pybind11::module_& module);

}  // namespace torch_openreg
