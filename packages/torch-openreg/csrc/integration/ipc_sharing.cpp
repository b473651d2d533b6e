// ipc_sharing.cpp — handles for a storage's bytes, storages over received ones.
#include "integration/ipc_sharing.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <utility>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/runtime_check.h"
#include "integration/device_allocator.h"
#include "integration/event.h"
#include "integration/stream.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

// The deleter of a received storage: the last close unmaps, stream-ordered.
void closeImport(void* pointer) {
  notifyStreamOrder(&StreamOrderObserver::memoryFreed, pointer);
  succeeded(orIpcCloseMemHandle(pointer));
}

// An event recorded on `stream` now, for another process; false if the
// stream has nothing queued (there is nothing to wait for).
bool recordForReceiver(const c10::Stream& stream, orIpcEventHandle_t& handle) {
  if (queryStream(stream)) return false;
  DeviceScope scope(stream.device_index());
  orEvent_t event = nullptr;
  OPENREG_CHECK(orEventCreateWithFlags(&event, orEventInterprocess | orEventDisableTiming));
  orError_t status = orEventRecord(event, nativeHandle(stream));
  if (status == orSuccess) status = orIpcGetEventHandle(&handle, event);
  // Destroying it leaves the record (and the receiver's wait for it) intact.
  succeeded(orEventDestroy(event));
  OPENREG_CHECK(status);
  return true;
}

}  // namespace

SharedStorage shareStorage(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  const size_t bytes = storage.nbytes();
  TORCH_CHECK(bytes > 0 && data.get() != nullptr, "shareStorage: an empty storage has no memory");
  const c10::DeviceIndex device = storage.device().index();
  const bool received = data.get_deleter() == &closeImport;
  TORCH_CHECK(received || deviceAllocator().owns(data),
              "Cannot send this openreg storage to another process: its memory (at ", data.get(),
              ") does not come from the openreg caching allocator, so this process cannot keep it "
              "alive for the receiver. Send a copy made by PyTorch instead (tensor.clone()).");
  SharedStorage shared{};
  OPENREG_CHECK(orIpcGetMemRangeHandle(&shared.memory, data.get(), bytes));
  // Received memory is kept alive by its exporter; this process's own is held
  // by the allocator until every receiver has let go.
  if (!received) deviceAllocator().markShared(data);
  try {
    shared.hasEvent = recordForReceiver(currentStream(device), shared.event);
  } catch (...) {
    close(shared.memory.fd);
    throw;
  }
  return shared;
}

c10::Storage openSharedStorage(const orIpcMemHandle_t& memory) {
  const auto device = static_cast<c10::DeviceIndex>(memory.device);
  void* pointer = nullptr;
  OPENREG_CHECK(orIpcOpenMemHandle(&pointer, memory, 0));
  markDeviceUsed(device);
  // Handed out for the current stream, which the sender's event (if any) is waited on.
  notifyStreamOrder(&StreamOrderObserver::memoryAllocated, pointer,
                    static_cast<size_t>(memory.size), nativeHandle(currentStream(device)));
  c10::DataPtr data(pointer, pointer, &closeImport, openregDevice(device));
  return c10::Storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(memory.size),
                      std::move(data), /*allocator=*/nullptr, /*resizable=*/false);
}

void waitForSharedEvent(const orIpcEventHandle_t& handle) {
  const auto device = static_cast<c10::DeviceIndex>(handle.device);
  orEvent_t event = nullptr;
  {
    DeviceScope scope(checkedDevice(device));
    OPENREG_CHECK(orIpcOpenEventHandle(&event, handle));
  }
  try {
    blockStream(event, currentStream(device));
  } catch (...) {
    destroyEvent(event);
    throw;
  }
  destroyEvent(event);
}

size_t collectSharedBlocks() {
  size_t held = 0;
  for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
    if (deviceUsed(device)) held += blockPool(device).collectShared();
  }
  return held;
}

}  // namespace torch_openreg
