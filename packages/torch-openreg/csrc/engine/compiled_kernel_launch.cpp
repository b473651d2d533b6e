// compiled_kernel_launch.cpp — argument translation and stream launch of compiled kernels.
#include "engine/compiled_kernel_launch.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <stdexcept>
#include <utility>

#include "base/address_ranges.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "engine/kernel_launch.h"
#include "engine/operator_errors.h"
#include "engine/race_detector.h"
#include "integration/stream.h"

namespace py = pybind11;

namespace torch_openreg {
namespace {

bool isPointerKind(char kind) {
  return kind == static_cast<char>(CompiledArgumentKind::ReadPointer) ||
         kind == static_cast<char>(CompiledArgumentKind::WritePointer);
}

bool isKnownKind(char kind) {
  return isPointerKind(kind) || kind == static_cast<char>(CompiledArgumentKind::Integer) ||
         kind == static_cast<char>(CompiledArgumentKind::Float);
}

uint64_t kernelViewWord(const at::Tensor& tensor, c10::DeviceIndex device) {
  // An empty tensor's address is never dereferenced (and may lie one past
  // its allocation, which need not be translatable).
  if (tensor.numel() == 0) return 0;
  return reinterpret_cast<uint64_t>(toKernelView(tensor.data_ptr(), device));
}

// A host tensor read by a queued kernel: a copy with the same strides, so a
// later change on the host cannot reach the kernel (CUDA copies launch
// arguments too). A layout with overlaps or gaps is kept by reference.
at::Tensor hostSnapshot(const at::Tensor& tensor) {
  if (!tensor.is_non_overlapping_and_dense()) return tensor;
  return tensor.clone(at::MemoryFormat::Preserve);
}

void runCompiledKernel(const CompiledKernel& kernel, const uint64_t* words) {
  if (const char* failure = kernel.entry()(words)) throw std::runtime_error(failure);
}

}  // namespace

CompiledKernel::CompiledKernel(std::string name, Entry entry, std::string kinds)
    : name_(std::move(name)), entry_(entry), kinds_(std::move(kinds)) {
  TORCH_CHECK(entry_ != nullptr, "compiled openreg kernel '", name_, "' has no entry point");
  for (const char kind : kinds_) {
    TORCH_CHECK(isKnownKind(kind), "compiled openreg kernel '", name_, "': unknown argument kind '",
                kind, "' (expected one of r, w, i, f)");
  }
}

void CompiledLaunchArguments::addTensor(const at::Tensor& tensor) {
  const size_t position = words_.size();
  const char kind = kernel_->kinds()[position];
  TORCH_CHECK(tensor.defined(), "compiled openreg kernel '", kernel_->name(), "': argument ",
              position, " is an undefined tensor");
  if (tensor.device().type() == c10::DeviceType::PrivateUse1) {
    const c10::DeviceIndex device = tensor.device().index();
    TORCH_CHECK(device_ < 0 || device_ == device,
                "Expected all tensors to be on the same device, but found at least two devices, "
                "openreg:",
                static_cast<int>(device_), " and openreg:", static_cast<int>(device),
                " (compiled kernel '", kernel_->name(), "', argument ", position, ")");
    device_ = device;
    words_.push_back(kernelViewWord(tensor, device));
    if (debugModeOn(kDebugRaces)) {
      // `w` is every pointer Inductor's kernel stores through (outputs and
      // in-place buffers); a write conflicts with reads too, so it covers both.
      (kind == static_cast<char>(CompiledArgumentKind::WritePointer) ? writes_ : reads_)
          .push_back(tensor);
    }
    return;
  }
  TORCH_CHECK(tensor.device().is_cpu(), "compiled openreg kernel '", kernel_->name(),
              "': argument ", position, " is on ", tensor.device(),
              "; only openreg and CPU tensors can be passed");
  TORCH_CHECK(kind != static_cast<char>(CompiledArgumentKind::WritePointer),
              "compiled openreg kernel '", kernel_->name(), "' would write CPU tensor argument ",
              position, " from the device; move it to openreg first (tensor.to('openreg'))");
  hostTensors_.push_back(hostSnapshot(tensor));
  words_.push_back(reinterpret_cast<uint64_t>(hostTensors_.back().data_ptr()));
}

void CompiledLaunchArguments::addInteger(int64_t value) {
  words_.push_back(static_cast<uint64_t>(value));
}

void CompiledLaunchArguments::addFloat(double value) {
  uint64_t word = 0;
  std::memcpy(&word, &value, sizeof(word));
  words_.push_back(word);
}

void CompiledLaunchArguments::launch() && {
  TORCH_INTERNAL_ASSERT(words_.size() == kernel_->kinds().size());
  const c10::DeviceIndex device = device_ >= 0 ? device_ : currentDevice();
  if (debugModeOn(kDebugRaces)) {
    checkLaunch("compiled kernel " + kernel_->name(), currentStream(device), reads_, writes_);
  }
  launchOnDevice(device, [kernel = std::move(kernel_), words = std::move(words_),
                          hostTensors = std::move(hostTensors_)] {
    runNamingOperator([&] { return "compiled kernel " + kernel->name(); },
                      [&] { runCompiledKernel(*kernel, words.data()); });
  });
}

namespace {

// Python face of a CompiledKernel: calling it with the kernel's arguments
// (tensors, ints, floats, in Inductor's order) launches it.
class PyCompiledKernel {
 public:
  PyCompiledKernel(std::string name, uintptr_t entry, std::string kinds)
      : kernel_(std::make_shared<const CompiledKernel>(
            std::move(name), reinterpret_cast<CompiledKernel::Entry>(entry), std::move(kinds))) {}

  void call(const py::args& args) const {
    const std::string& kinds = kernel_->kinds();
    if (args.size() != kinds.size()) {
      throw py::type_error("compiled openreg kernel '" + kernel_->name() + "' takes " +
                           std::to_string(kinds.size()) + " arguments (" +
                           std::to_string(args.size()) + " given)");
    }
    CompiledLaunchArguments launch(kernel_);
    for (size_t i = 0; i < kinds.size(); ++i) add(launch, kinds[i], args[i].ptr(), i);
    py::gil_scoped_release release;  // a full stream queue waits for work that may need the GIL
    std::move(launch).launch();
  }

  const std::string& name() const { return kernel_->name(); }
  const std::string& kinds() const { return kernel_->kinds(); }

 private:
  void add(CompiledLaunchArguments& launch, char kind, PyObject* value, size_t position) const {
    if (isPointerKind(kind)) {
      if (!THPVariable_Check(value)) throw wrongType(position, "a tensor", value);
      launch.addTensor(THPVariable_Unpack(value));
    } else if (kind == static_cast<char>(CompiledArgumentKind::Integer)) {
      if (!PyLong_Check(value)) throw wrongType(position, "an int", value);
      const long long integer = PyLong_AsLongLong(value);
      if (integer == -1 && PyErr_Occurred()) throw py::error_already_set();
      launch.addInteger(integer);
    } else {
      if (!PyFloat_Check(value) && !PyLong_Check(value))
        throw wrongType(position, "a float", value);
      const double real = PyFloat_AsDouble(value);
      if (real == -1.0 && PyErr_Occurred()) throw py::error_already_set();
      launch.addFloat(real);
    }
  }

  py::type_error wrongType(size_t position, const char* expected, PyObject* value) const {
    return py::type_error("compiled openreg kernel '" + kernel_->name() + "': argument " +
                          std::to_string(position) + " must be " + expected + ", not " +
                          Py_TYPE(value)->tp_name);
  }

  std::shared_ptr<const CompiledKernel> kernel_;
};

}  // namespace

void registerCompiledKernelBindings(py::module_& module) {
  py::class_<PyCompiledKernel>(
      module, "_CompiledKernel",
      "A kernel Inductor compiled for openreg; calling it enqueues it on the "
      "current stream of its arguments' device.")
      .def(py::init<std::string, uintptr_t, std::string>(), py::arg("name"), py::arg("entry"),
           py::arg("kinds"))
      .def("__call__", &PyCompiledKernel::call)
      .def_property_readonly("name", &PyCompiledKernel::name)
      .def_property_readonly("kinds", &PyCompiledKernel::kinds);
  module.def(
      "_current_raw_stream",
      [](int device) {
        const c10::DeviceIndex index = resolveDevice(static_cast<c10::DeviceIndex>(device));
        return reinterpret_cast<intptr_t>(nativeHandle(currentStream(index)));
      },
      "The runtime handle (orStream_t) of the current stream of `device` (-1: the current "
      "device).");
}

}  // namespace torch_openreg
