// storage_copy.cpp — the old bytes of a resized storage, copied in stream
// order through the launch path (see integration/storage_resize.h).
//
// A runtime copy (orMemcpyAsync), as a plain byte copy should be: the launch
// path checks it for races and records it like any copy, and fault injection
// (OPENREG_FAULT_MEMCPY) reaches it. The old memory and the storage stay
// alive until the copy has run.
#include <c10/core/Storage.h>

#include <memory>
#include <utility>

#include "engine/kernel_launch.h"
#include "engine/tensor_layout.h"
#include "integration/storage_resize.h"

namespace torch_openreg {
namespace {

// A byte tensor over `storage`'s first `bytes`, for the race detector.
at::Tensor bytesOf(c10::Storage storage, size_t bytes) {
  TensorLayout layout;
  layout.sizes = {static_cast<int64_t>(bytes)};
  layout.strides = {1};
  layout.dtype = c10::kByte;
  layout.defined = true;
  return tensorOver(std::move(storage), c10::DispatchKey::PrivateUse1, layout);
}

void copyKeptBytes(c10::StorageImpl* storage, c10::DataPtr old, size_t bytes) {
  const c10::DeviceIndex device = storage->device().index();
  c10::Storage oldStorage(c10::Storage::use_byte_size_t(), bytes, std::move(old), nullptr, false);
  c10::Storage newStorage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage));
  const at::Tensor from = bytesOf(oldStorage, bytes);
  const at::Tensor to = bytesOf(newStorage, bytes);
  LaunchSpec spec{LaunchContext::forDevice(device), "storage resize (its kept bytes)", from, to};
  spec.activity = ActivityKind::Memcpy;
  spec.activityLabel = "Memcpy DtoD";
  copyOnStream(spec, newStorage.mutable_data(), oldStorage.data(), bytes, orMemcpyDeviceToDevice,
               [oldStorage, newStorage] {});
}

const bool contentCopyInstalled = [] {
  installStorageContentCopy(&copyKeptBytes);
  return true;
}();

}  // namespace
}  // namespace torch_openreg
