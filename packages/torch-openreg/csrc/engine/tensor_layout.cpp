// tensor_layout.cpp — layouts, and TensorImpls over given storage.
#include "engine/tensor_layout.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/core/TensorImpl.h>

#include <utility>

#include "base/device.h"
#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {

at::Tensor makeTensor(c10::Storage storage, c10::DispatchKey key, caffe2::TypeMeta dtype,
                      c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t storageOffset) {
  auto impl =
      c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), dtype);
  impl->set_sizes_and_strides(sizes, strides, storageOffset);
  return at::Tensor(std::move(impl));
}

}  // namespace

TensorLayout TensorLayout::of(const at::Tensor& tensor) {
  TensorLayout layout;
  if (!tensor.defined()) return layout;
  layout.sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  layout.strides.assign(tensor.strides().begin(), tensor.strides().end());
  layout.storageOffset = tensor.storage_offset();
  layout.dtype = tensor.scalar_type();
  layout.defined = true;
  return layout;
}

bool TensorLayout::matches(const at::Tensor& tensor) const {
  return tensor.sizes() == c10::IntArrayRef(sizes) &&
         tensor.strides() == c10::IntArrayRef(strides) && tensor.storage_offset() == storageOffset;
}

at::Tensor tensorOver(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  at::Tensor tensor = makeTensor(std::move(storage), key, like.dtype(), like.sizes(),
                                 like.strides(), like.storage_offset());
  tensor.unsafeGetTensorImpl()->_set_conj(like.is_conj());
  tensor.unsafeGetTensorImpl()->_set_neg(like.is_neg());
  return tensor;
}

at::Tensor tensorOver(c10::Storage storage, c10::DispatchKey key, const TensorLayout& layout) {
  return makeTensor(std::move(storage), key, c10::scalarTypeToTypeMeta(layout.dtype), layout.sizes,
                    layout.strides, layout.storageOffset);
}

at::Tensor emptyWithLayout(const TensorLayout& layout, const LaunchContext& context) {
  if (!layout.defined) return at::Tensor();
  // Like empty_strided: a fresh storage starts at offset 0.
  const size_t bytes = at::detail::computeStorageNbytes(layout.sizes, layout.strides,
                                                        c10::elementSize(layout.dtype));
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                       deviceAllocator().allocateOn(context.device, bytes, context.handle),
                       &deviceAllocator(), /*resizable=*/true);
  return makeTensor(std::move(storage), c10::DispatchKey::PrivateUse1,
                    c10::scalarTypeToTypeMeta(layout.dtype), layout.sizes, layout.strides, 0);
}

}  // namespace torch_openreg
