// storage_resize.cpp — reallocation of openreg storages.
#include "integration/storage_resize.h"

#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>

#include "base/runtime_check.h"
#include "integration/device_allocator.h"
#include "integration/stream.h"

namespace torch_openreg {

void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t oldBytes = storage->nbytes();
  if (newBytes == oldBytes) return;
  const c10::DeviceIndex device = storage->device().index();
  c10::DataPtr old = storage->set_data_ptr(deviceAllocator().allocateOn(device, newBytes));
  storage->set_nbytes(newBytes);
  const size_t kept = std::min(oldBytes, newBytes);
  if (kept == 0) return;
  // Stream-ordered after the work that wrote the old bytes; the old memory
  // and the storage stay alive until the copy has run.
  orStream_t stream = nativeHandle(currentStream(device));
  OPENREG_CHECK(
      orMemcpyAsync(storage->mutable_data(), old.get(), kept, orMemcpyDeviceToDevice, stream));
  auto oldMemory = std::make_shared<c10::DataPtr>(std::move(old));
  c10::Storage keep(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage));
  OPENREG_CHECK(openreg::launchHostFunc(stream, [oldMemory, keep] {}));
}

}  // namespace torch_openreg
