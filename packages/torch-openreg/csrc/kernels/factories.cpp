// factories.cpp — native empty / empty_strided: tensors in device memory.
//
// All other factories (zeros, full, randn, arange, ...) are composites that
// call these and then fill the result on the device.
#include <ATen/EmptyTensor.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/library.h>

#include "base/device.h"
#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

const c10::DispatchKeySet kOpenRegKeys(c10::DispatchKey::PrivateUse1);

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
  return at::detail::empty_generic(size, &deviceAllocator(), kOpenRegKeys,
                                   c10::dtype_or_default(dtype), memoryFormat);
}

at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device, std::optional<bool> pinMemory) {
  checkOptions(layout, pinMemory);
  DeviceScope scope(targetDevice(device));
  return at::detail::empty_strided_generic(size, stride, &deviceAllocator(), kOpenRegKeys,
                                           c10::dtype_or_default(dtype));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty));
  m.impl("empty_strided", TORCH_FN(emptyStrided));
}

}  // namespace
}  // namespace torch_openreg
