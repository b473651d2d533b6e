// storage_resize.cpp — reallocation of openreg storages.
#include "integration/storage_resize.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "integration/device_allocator.h"

namespace torch_openreg {
namespace {
std::atomic<StorageContentCopy> contentCopy{nullptr};
}  // namespace

void installStorageContentCopy(StorageContentCopy copy) {
  contentCopy.store(copy, std::memory_order_release);
}

void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t oldBytes = storage->nbytes();
  if (newBytes == oldBytes) return;
  const c10::DeviceIndex device = storage->device().index();
  c10::DataPtr old = storage->set_data_ptr(deviceAllocator().allocateOn(device, newBytes));
  storage->set_nbytes(newBytes);
  const size_t kept = std::min(oldBytes, newBytes);
  if (kept == 0) return;
  StorageContentCopy copy = contentCopy.load(std::memory_order_acquire);
  TORCH_INTERNAL_ASSERT(copy != nullptr, "openreg: the engine has not installed its storage copy");
  copy(storage, std::move(old), kept);
}

}  // namespace torch_openreg
