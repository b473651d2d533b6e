// storage_resize.cpp — reallocation of openreg storages.
#include "storage_resize.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "device_allocator.h"
#include "runtime_check.h"

namespace torch_openreg {

void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t oldBytes = storage->nbytes();
  if (newBytes == oldBytes) return;
  const c10::DeviceIndex device = storage->device().index();
  c10::DataPtr fresh = deviceAllocator().allocateOn(device, newBytes);
  const size_t kept = std::min(oldBytes, newBytes);
  if (kept > 0) {
    OPENREG_CHECK(orMemcpy(fresh.get(), storage->data(), kept, orMemcpyDeviceToDevice));
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(newBytes);
}

}  // namespace torch_openreg
