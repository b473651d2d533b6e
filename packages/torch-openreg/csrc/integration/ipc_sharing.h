// ipc_sharing.h — openreg storages shared with other processes: what
// torch.multiprocessing's reductions call (torch_openreg/_multiprocessing.py),
// as CUDA's do through StorageSharing.cpp and CUDAIPCTypes.
//
// Zero copy: the receiver maps the sender's device memory (the runtime's IPC
// handles, openreg.h "Interprocess communication"). Lifetime: the sender's
// block is marked shared, so the allocator holds it while any receiver maps
// it (memory/block_pool_shared.cpp). Order: if the sender's current stream
// still has work queued, an interprocess event recorded there at the send is
// waited for by the receiver's current stream, so the receiver's work sees
// the sender's pending writes without a device synchronize.
#pragma once

#include <openreg.h>

#include <c10/core/Storage.h>

namespace torch_openreg {

struct SharedStorage {
  orIpcMemHandle_t memory;  // its descriptor belongs to the caller
  bool hasEvent;            // false: no work was queued, nothing to wait for
  orIpcEventHandle_t event;  // if hasEvent; its descriptor belongs to the caller
};

// Handles for the bytes of `storage` (nbytes > 0), memory of the openreg
// allocator or memory this process received. Raises, naming the fix, for
// memory it cannot keep alive for a receiver (a tensor over foreign memory).
SharedStorage shareStorage(const c10::Storage& storage);

// A non-resizable storage over another process's memory; freeing it closes
// the mapping once the work queued before has completed. Does not take the
// handle's descriptor.
c10::Storage openSharedStorage(const orIpcMemHandle_t& memory);

// Makes the current stream of the event's device wait for the sender's
// record. Does not take the handle's descriptor.
void waitForSharedEvent(const orIpcEventHandle_t& event);

// Frees the shared blocks of every device that no other process holds any
// more (torch.openreg.ipc_collect); returns how many stay held.
size_t collectSharedBlocks();

}  // namespace torch_openreg
