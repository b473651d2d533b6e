// resize.cpp — resize_ and the set_ family: metadata and storage changes.
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include "base/device.h"
#include "integration/device_allocator.h"
#include "integration/storage_resize.h"

namespace torch_openreg {
namespace {

size_t bytesNeeded(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return 0;
  size_t lastElement = static_cast<size_t>(tensor.storage_offset());
  for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
    lastElement +=
        static_cast<size_t>(tensor.size(dim) - 1) * static_cast<size_t>(tensor.stride(dim));
  }
  return (lastElement + 1) * tensor.itemsize();
}

void growStorageFor(const at::Tensor& tensor) {
  const size_t needed = bytesNeeded(tensor);
  if (needed > tensor.storage().nbytes()) {
    resizeStorageBytes(tensor.storage().unsafeGetStorageImpl(), needed);
  }
}

void checkStorage(const at::Tensor& self, const c10::Storage& storage) {
  TORCH_CHECK(storage.device_type() == c10::DeviceType::PrivateUse1,
              "Expected an openreg storage for set_, got a ", storage.device_type(), " storage");
  TORCH_CHECK(storage.device() == self.device(), "Expected a storage on ", self.device(),
              " for set_, got one on ", storage.device());
}

const at::Tensor& resize(const at::Tensor& self, at::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memoryFormat) {
  for (int64_t length : size) {
    TORCH_CHECK(length >= 0, "Trying to create tensor with negative dimension ", length, ": ",
                size);
  }
  // The CPU's rules: the same sizes keep the strides (a channels_last tensor
  // stays so); new sizes are contiguous; an explicit format then restrides,
  // and "preserve" is refused.
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  growStorageFor(self);
  if (memoryFormat) {
    TORCH_CHECK(*memoryFormat != c10::MemoryFormat::Preserve, "Unsupported memory format",
                *memoryFormat);
    impl->empty_tensor_restride(*memoryFormat);
  }
  return self;
}

at::Tensor& setStorageWithLayout(at::Tensor& self, at::Storage source, int64_t offset,
                                 at::IntArrayRef size, at::IntArrayRef stride) {
  checkStorage(self, source);
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "set_: size ", size, " and stride ", stride,
                " have different lengths");
    impl->set_sizes_and_strides(size, stride);
  }
  growStorageFor(self);
  return self;
}

at::Tensor& setStorage(at::Tensor& self, at::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return setStorageWithLayout(self, std::move(source), 0, {elements}, {});
}

at::Tensor& setTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return setStorageWithLayout(self, source.storage(), source.storage_offset(), source.sizes(),
                              source.strides());
}

at::Tensor& setEmpty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, self.device()),
                     &deviceAllocator(), /*resizable=*/true);
  return setStorageWithLayout(self, std::move(empty), 0, {0}, {});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage", TORCH_FN(setStorage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(setStorageWithLayout));
  m.impl("set_.source_Tensor", TORCH_FN(setTensor));
  m.impl("set_", TORCH_FN(setEmpty));
}

}  // namespace
}  // namespace torch_openreg
