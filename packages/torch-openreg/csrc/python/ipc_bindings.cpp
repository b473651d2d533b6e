// ipc_bindings.cpp — storages and events across processes, for Python.
//
// Handles cross as tuples of plain fields plus a file descriptor, which the
// Python side sends with multiprocessing's descriptor passing:
//   memory: (fd, device, memory_id, offset, size, exporter_pid)
//   event:  (fd, device, slot, epoch, exporter_pid)
// Descriptors returned belong to the caller; descriptors passed in are not
// taken (the caller closes them).
#include "python/ipc_bindings.h"

#include <openreg.h>

#include <torch/csrc/Event.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "base/device.h"
#include "base/runtime_check.h"
#include "integration/event.h"
#include "integration/ipc_sharing.h"

namespace py = pybind11;

namespace torch_openreg {
namespace {

using MemoryFields = std::tuple<int, int, uint64_t, uint64_t, uint64_t, int>;
using EventFields = std::tuple<int, int, uint64_t, uint64_t, int>;

MemoryFields fieldsOf(const orIpcMemHandle_t& handle) {
  return {handle.fd,     handle.device, handle.memoryId,
          handle.offset, handle.size,   handle.exporterPid};
}

EventFields fieldsOf(const orIpcEventHandle_t& handle) {
  return {handle.fd, handle.device, handle.slot, handle.epoch, handle.exporterPid};
}

orIpcMemHandle_t memoryHandle(const MemoryFields& fields) {
  orIpcMemHandle_t handle{};
  std::tie(handle.fd, handle.device, handle.memoryId, handle.offset, handle.size,
           handle.exporterPid) = fields;
  return handle;
}

orIpcEventHandle_t eventHandle(const EventFields& fields) {
  orIpcEventHandle_t handle{};
  std::tie(handle.fd, handle.device, handle.slot, handle.epoch, handle.exporterPid) = fields;
  return handle;
}

const c10::Storage& storageOf(const py::handle& object) {
  TORCH_CHECK_TYPE(THPStorage_Check(object.ptr()), "expected a torch.UntypedStorage, got ",
                   py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>());
  return THPStorage_Unpack(object.ptr());
}

c10::Event& eventOf(const py::handle& object) {
  TORCH_CHECK_TYPE(THPEvent_Check(object.ptr()), "expected a torch.openreg.Event, got ",
                   py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>());
  return reinterpret_cast<THPEvent*>(object.ptr())->event;
}

std::pair<MemoryFields, std::optional<EventFields>> shareStorageFields(const py::handle& object) {
  const SharedStorage shared = shareStorage(storageOf(object));
  std::optional<EventFields> event;
  if (shared.hasEvent) event = fieldsOf(shared.event);
  return {fieldsOf(shared.memory), event};
}

py::object openStorage(const MemoryFields& fields) {
  return py::reinterpret_steal<py::object>(
      THPStorage_Wrap(openSharedStorage(memoryHandle(fields))));
}

void makeInterprocess(const py::handle& object, int device) {
  const c10::DeviceIndex index = checkedDevice(static_cast<c10::DeviceIndex>(device));
  orEvent_t native = nullptr;
  {
    DeviceScope scope(index);
    OPENREG_CHECK(orEventCreateWithFlags(&native, orEventInterprocess | orEventDisableTiming));
  }
  installNativeEvent(eventOf(object), native, index);
}

EventFields eventIpcHandle(const py::handle& object) {
  const c10::Event& event = eventOf(object);
  constexpr const char* kNotInterprocess =
      "this event is not an interprocess event: create it with "
      "torch.openreg.Event(interprocess=True)";
  TORCH_CHECK(event.eventId() != nullptr, kNotInterprocess);
  orIpcEventHandle_t handle{};
  const orError_t status = orIpcGetEventHandle(&handle, static_cast<orEvent_t>(event.eventId()));
  if (status == orErrorInvalidResourceHandle) {
    orGetLastError();  // reported below, in PyTorch's words
    TORCH_CHECK(false, kNotInterprocess);
  }
  OPENREG_CHECK(status);
  return fieldsOf(handle);
}

void openEventHandle(const py::handle& object, const EventFields& fields) {
  const orIpcEventHandle_t handle = eventHandle(fields);
  const c10::DeviceIndex device = checkedDevice(static_cast<c10::DeviceIndex>(handle.device));
  orEvent_t native = nullptr;
  {
    DeviceScope scope(device);
    OPENREG_CHECK(orIpcOpenEventHandle(&native, handle));
  }
  installNativeEvent(eventOf(object), native, device);
}

}  // namespace

void bindIpc(py::module& m) {
  m.def("_ipc_share_storage", &shareStorageFields, py::arg("storage"),
        "Runtime IPC handles for an openreg UntypedStorage's bytes: (memory fields, event "
        "fields or None); the storage's block is held for receivers. The descriptors are the "
        "caller's.");
  m.def("_ipc_open_storage", &openStorage, py::arg("memory"),
        "An UntypedStorage over memory another process shared (memory fields); does not take "
        "the descriptor.");
  m.def(
      "_ipc_wait_event", [](const EventFields& fields) { waitForSharedEvent(eventHandle(fields)); },
      py::arg("event"),
      "Make the current stream of the event's device wait for another process's record (event "
      "fields); does not take the descriptor.");
  m.def("_ipc_collect", &collectSharedBlocks,
        "Free shared blocks no other process holds any more; returns how many stay held.");
  m.def("_event_make_interprocess", &makeInterprocess, py::arg("event"), py::arg("device"),
        "Give a new torch.openreg.Event an interprocess native event on `device`.");
  m.def("_event_ipc_handle", &eventIpcHandle, py::arg("event"),
        "Event fields of an interprocess torch.openreg.Event; the descriptor is the caller's.");
  m.def("_event_open_ipc_handle", &openEventHandle, py::arg("event"), py::arg("handle"),
        "Give a new torch.openreg.Event another process's event (event fields); does not take "
        "the descriptor.");
}

}  // namespace torch_openreg
