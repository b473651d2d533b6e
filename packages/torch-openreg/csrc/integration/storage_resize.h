// storage_resize.h — growing/shrinking the bytes of an openreg storage.
//
// Shared by resize_, set_ and the hooks' resizePrivateUse1Bytes (used by
// UntypedStorage.resize_): new device memory, old contents copied over in
// stream order. The copy is stream work, which only the engine launches
// (engine/kernel_launch.h): it installs the copy when the extension loads
// (engine/storage_copy.cpp), since this layer may not call it.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

namespace torch_openreg {

void resizeStorageBytes(c10::StorageImpl* storage, size_t newBytes);

// Copies the first `bytes` of `old` into `storage`'s new memory after the
// work queued so far on the current stream, keeping both alive until then.
using StorageContentCopy = void (*)(c10::StorageImpl* storage, c10::DataPtr old, size_t bytes);
void installStorageContentCopy(StorageContentCopy copy);

}  // namespace torch_openreg
