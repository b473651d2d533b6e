// factories.cpp — native empty / empty_strided: tensors in device memory.
//
// All other factories (zeros, full, randn, arange, ...) are composites that
// call these and then fill the result on the device.
#include <ATen/EmptyTensor.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/library.h>

#include "base/debug_modes.h"
#include "base/device.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"
#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

const c10::DispatchKeySet kOpenRegKeys(c10::DispatchKey::PrivateUse1);

// OPENREG_DEBUG=poison: the block pool fills new memory with 0xFF bytes without
// knowing its type; here the dtype is known, so the types for which those bytes
// could pass as data get typedPoisonValue() instead. The whole storage is
// filled (the gaps of empty_strided too: nobody wrote them either), as stream
// work queued after the pool's fill and before anything the caller enqueues.
// Like that fill it is part of the allocation, not an access the race
// detector checks.
at::Tensor poisonedByType(at::Tensor tensor) {
  if (!debugModeOn(kDebugPoison)) return tensor;
  const std::optional<c10::Scalar> value = typedPoisonValue(tensor.scalar_type());
  const auto elements = static_cast<int64_t>(tensor.storage().nbytes() / tensor.dtype().itemsize());
  if (!value || elements == 0) return tensor;
  const c10::DeviceIndex device = tensor.device().index();
  const at::Tensor target = KernelContext(device).alias(tensor);
  // Part of the allocation: it names no tensor for the checks (launch_spec.h).
  const LaunchSpec spec{LaunchContext::forDevice(device), "openreg poison fill"};
  launchOnDevice(spec, [target, value = *value, elements] {
    target.as_strided({elements}, {1}, 0).fill_(value);
  });
  return tensor;
}

c10::DeviceIndex targetDevice(std::optional<c10::Device> device) {
  return resolveDevice(device ? device->index() : -1);
}

void checkOptions(std::optional<c10::Layout> layout, std::optional<bool> pinMemory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "openreg supports strided tensors only, got layout ", *layout);
  TORCH_CHECK(!pinMemory.value_or(false), "Only dense CPU tensors can be pinned");
}

at::Tensor empty(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                 std::optional<bool> pinMemory, std::optional<c10::MemoryFormat> memoryFormat) {
  checkOptions(layout, pinMemory);
  DeviceScope scope(targetDevice(device));
  return poisonedByType(at::detail::empty_generic(size, &deviceAllocator(), kOpenRegKeys,
                                                  c10::dtype_or_default(dtype), memoryFormat));
}

at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device, std::optional<bool> pinMemory) {
  checkOptions(layout, pinMemory);
  DeviceScope scope(targetDevice(device));
  return poisonedByType(at::detail::empty_strided_generic(
      size, stride, &deviceAllocator(), kOpenRegKeys, c10::dtype_or_default(dtype)));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty));
  m.impl("empty_strided", TORCH_FN(emptyStrided));
}

}  // namespace
}  // namespace torch_openreg
