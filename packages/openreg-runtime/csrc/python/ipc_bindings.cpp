// ipc_bindings.cpp — IpcMemHandle, IpcEventHandle and the ipc_* functions.
//
// A handle object owns its descriptor: it closes it when closed or collected.
// Sending one to another process is left to Python (openreg_runtime.ipc
// registers multiprocessing reducers that pass the descriptor with
// SCM_RIGHTS); the receiver builds a handle around the descriptor it got.
#include "ipc_bindings.h"

#include <pybind11/stl.h>

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "status.h"

namespace py = pybind11;

namespace openreg_python {
namespace {

uintptr_t address(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }
void* pointerFrom(uintptr_t value) { return reinterpret_cast<void*>(value); }

// What both handle kinds share: the owned descriptor.
class OwnedDescriptor {
 public:
  explicit OwnedDescriptor(int fd) : fd_(fd) {
    if (fd < 0)
      throw py::value_error("a handle needs an open file descriptor, got " + std::to_string(fd));
  }
  ~OwnedDescriptor() { close(); }
  OwnedDescriptor(const OwnedDescriptor&) = delete;
  OwnedDescriptor& operator=(const OwnedDescriptor&) = delete;

  int fd() const {
    if (fd_ < 0) throw py::value_error("this IPC handle was closed");
    return fd_;
  }
  bool closed() const { return fd_ < 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

class IpcMemHandle : public OwnedDescriptor {
 public:
  IpcMemHandle(int fd, int device, unsigned long long memoryId, unsigned long long offset,
               unsigned long long size, int exporterPid)
      : OwnedDescriptor(fd) {
    raw_.device = device;
    raw_.memoryId = memoryId;
    raw_.offset = offset;
    raw_.size = size;
    raw_.exporterPid = exporterPid;
  }
  explicit IpcMemHandle(const orIpcMemHandle_t& raw) : OwnedDescriptor(raw.fd), raw_(raw) {}

  orIpcMemHandle_t raw() const {
    orIpcMemHandle_t handle = raw_;
    handle.fd = fd();
    return handle;
  }
  int device() const { return raw_.device; }
  unsigned long long memoryId() const { return raw_.memoryId; }
  unsigned long long offset() const { return raw_.offset; }
  unsigned long long size() const { return raw_.size; }
  int exporterPid() const { return raw_.exporterPid; }
  std::string repr() const {
    std::ostringstream text;
    text << "IpcMemHandle(device=" << raw_.device << ", offset=" << raw_.offset
         << ", size=" << raw_.size << ", exporter_pid=" << raw_.exporterPid
         << (closed() ? ", closed" : "") << ")";
    return text.str();
  }

 private:
  orIpcMemHandle_t raw_{};
};

class IpcEventHandle : public OwnedDescriptor {
 public:
  IpcEventHandle(int fd, int device, unsigned long long slot, unsigned long long epoch,
                 int exporterPid)
      : OwnedDescriptor(fd) {
    raw_.device = device;
    raw_.slot = slot;
    raw_.epoch = epoch;
    raw_.exporterPid = exporterPid;
  }
  explicit IpcEventHandle(const orIpcEventHandle_t& raw) : OwnedDescriptor(raw.fd), raw_(raw) {}

  orIpcEventHandle_t raw() const {
    orIpcEventHandle_t handle = raw_;
    handle.fd = fd();
    return handle;
  }
  int device() const { return raw_.device; }
  unsigned long long slot() const { return raw_.slot; }
  unsigned long long epoch() const { return raw_.epoch; }
  int exporterPid() const { return raw_.exporterPid; }

 private:
  orIpcEventHandle_t raw_{};
};

std::shared_ptr<IpcMemHandle> getMemHandle(uintptr_t pointer, std::optional<size_t> size) {
  orIpcMemHandle_t raw{};
  if (size) {
    checkStatus(orIpcGetMemRangeHandle(&raw, pointerFrom(pointer), *size));
  } else {
    checkStatus(orIpcGetMemHandle(&raw, pointerFrom(pointer)));
  }
  return std::make_shared<IpcMemHandle>(raw);
}

uintptr_t openMemHandle(const IpcMemHandle& handle) {
  void* pointer = nullptr;
  checkStatus(orIpcOpenMemHandle(&pointer, handle.raw(), 0));
  return address(pointer);
}

bool memQuery(uintptr_t pointer, size_t size) {
  const orError_t status = orIpcMemQuery(pointerFrom(pointer), size);
  if (status == orErrorNotReady) {
    orGetLastError();
    return false;
  }
  checkStatus(status);
  return true;
}

}  // namespace

py::object eventIpcHandle(orEvent_t event) {
  orIpcEventHandle_t raw{};
  checkStatus(orIpcGetEventHandle(&raw, event));
  return py::cast(std::make_shared<IpcEventHandle>(raw));
}

orEvent_t openIpcEventHandle(const py::object& handle) {
  if (!py::isinstance<IpcEventHandle>(handle)) {
    throw py::type_error(
        "Event.from_ipc_handle expects an IpcEventHandle (from Event.ipc_handle), got " +
        std::string(py::str(py::type::of(handle).attr("__name__"))));
  }
  orEvent_t event = nullptr;
  checkStatus(orIpcOpenEventHandle(&event, handle.cast<const IpcEventHandle&>().raw()));
  return event;
}

void defineIpc(py::module_& m) {
  py::class_<IpcMemHandle, std::shared_ptr<IpcMemHandle>>(
      m, "IpcMemHandle",
      "A range of device memory shared with other processes (``ipc_get_mem_handle``).\n\n"
      "It owns a file descriptor that holds a lease on the range: the exporting process\n"
      "keeps the memory while the handle, a copy of it sent to another process, or an import\n"
      "of it exists. ``close`` it (or use it as a context manager) once it was sent. Sent\n"
      "through ``multiprocessing`` (after ``import openreg_runtime``) the descriptor travels\n"
      "with it.")
      .def(py::init<int, int, unsigned long long, unsigned long long, unsigned long long, int>(),
           py::arg("fd"), py::arg("device"), py::arg("memory_id"), py::arg("offset"),
           py::arg("size"), py::arg("exporter_pid"),
           "A handle around a received descriptor, which it then owns.")
      .def_property_readonly("fd", &IpcMemHandle::fd, "The descriptor (raises once closed).")
      .def_property_readonly("device", &IpcMemHandle::device,
                             "Device index; imports map into this process's same index.")
      .def_property_readonly(
          "memory_id", &IpcMemHandle::memoryId,
          "Identifies the exporter's memory file (with offset and size: the bytes).")
      .def_property_readonly("offset", &IpcMemHandle::offset,
                             "First byte of the range in that file.")
      .def_property_readonly("size", &IpcMemHandle::size, "Bytes in the range.")
      .def_property_readonly("exporter_pid", &IpcMemHandle::exporterPid,
                             "The process whose device allocated the memory.")
      .def_property_readonly("closed", &IpcMemHandle::closed, "True after ``close``.")
      .def("close", &IpcMemHandle::close, "Close the descriptor (and drop its lease).")
      .def("__enter__", [](std::shared_ptr<IpcMemHandle> self) { return self; })
      .def("__exit__", [](IpcMemHandle& self, py::args) { self.close(); })
      .def("__repr__", &IpcMemHandle::repr);
  py::class_<IpcEventHandle, std::shared_ptr<IpcEventHandle>>(
      m, "IpcEventHandle",
      "An interprocess event shared with other processes (``Event.ipc_handle``).\n\n"
      "It owns a file descriptor; ``close`` it once it was sent.")
      .def(py::init<int, int, unsigned long long, unsigned long long, int>(), py::arg("fd"),
           py::arg("device"), py::arg("slot"), py::arg("epoch"), py::arg("exporter_pid"),
           "A handle around a received descriptor, which it then owns.")
      .def_property_readonly("fd", &IpcEventHandle::fd, "The descriptor (raises once closed).")
      .def_property_readonly("device", &IpcEventHandle::device, "The event's device.")
      .def_property_readonly("slot", &IpcEventHandle::slot,
                             "Where the event's state lies in the exporter's event file.")
      .def_property_readonly("epoch", &IpcEventHandle::epoch, "Which event occupies the slot.")
      .def_property_readonly("exporter_pid", &IpcEventHandle::exporterPid,
                             "The process that created the event.")
      .def_property_readonly("closed", &IpcEventHandle::closed, "True after ``close``.")
      .def("close", &IpcEventHandle::close, "Close the descriptor.")
      .def("__enter__", [](std::shared_ptr<IpcEventHandle> self) { return self; })
      .def("__exit__", [](IpcEventHandle& self, py::args) { self.close(); });
  m.def("ipc_get_mem_handle", &getMemHandle, py::arg("ptr"), py::arg("size") = py::none(),
        "An IpcMemHandle for the allocation starting at ``ptr`` (orIpcGetMemHandle), or for\n"
        "``size`` bytes from ``ptr`` inside one allocation (orIpcGetMemRangeHandle).");
  m.def("ipc_open_mem_handle", &openMemHandle, py::arg("handle"),
        py::call_guard<py::gil_scoped_release>(),
        "Map another process's memory; returns its device address here. Opening a range\n"
        "already open returns the same address; close each open with ``ipc_close_mem_handle``.");
  m.def(
      "ipc_close_mem_handle",
      [](uintptr_t pointer) { checkStatus(orIpcCloseMemHandle(pointerFrom(pointer))); },
      py::arg("ptr"),
      "End one open of an imported address; the last one unmaps it once the work queued\n"
      "before the call has completed.");
  m.def("ipc_mem_query", &memQuery, py::arg("ptr"), py::arg("size") = 0,
        "True when no other process (and no handle not yet closed) holds any part of\n"
        "``size`` bytes from ``ptr`` (0: the whole allocation).");
}

}  // namespace openreg_python
