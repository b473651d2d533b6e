// storage_resize.h — growing/shrinking the bytes of an openreg storage.
//
// Shared by resize_, set_ and the hooks' resizePrivateUse1Bytes (used by
// UntypedStorage.resize_): new device memory, old contents copied over.
#pragma once

#include <c10/core/StorageImpl.h>

namespace torch_openreg {

void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes);

}  // namespace torch_openreg
