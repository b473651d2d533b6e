// module.cpp — pybind11 bindings of the OpenReg C API (openreg_runtime._runtime).
//
// Uses only openreg.h, like any other client of the runtime. Errors become
// instances of openreg_runtime.errors classes; calls that can block release
// the GIL, because stream work may itself need it (Stream.launch).
#include <pybind11/functional.h>
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc_bindings.h"
#include "openreg.h"
#include "status.h"

namespace py = pybind11;

namespace {

using openreg_python::checkStatus;
using openreg_python::StatusError;

void translateStatusError(std::exception_ptr pending) {
  try {
    if (pending) std::rethrow_exception(pending);
  } catch (const StatusError& error) {
    py::object errors = py::module_::import("openreg_runtime.errors");
    py::object instance = errors.attr("from_status")(static_cast<int>(error.code), error.message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
  }
}

// Makes `device` current for the scope (when given), restoring the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(std::optional<int> device) {
    checkStatus(orGetDevice(&previous_));
    if (device && *device != previous_) {
      checkStatus(orSetDevice(*device));
      changed_ = true;
    }
  }
  ~DeviceScope() {
    if (changed_) orSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// True when work is complete, false when it is not yet (orErrorNotReady);
// any other failure raises.
bool readiness(orError_t status) {
  if (status == orErrorNotReady) {
    orGetLastError();
    return false;
  }
  checkStatus(status);
  return true;
}

int currentDevice() {
  int device = 0;
  checkStatus(orGetDevice(&device));
  return device;
}

uintptr_t address(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }
void* pointerFrom(uintptr_t value) { return reinterpret_cast<void*>(value); }

// ---- Memory blocks shared with pending stream work -------------------------
// Runs a call that enqueues work with the GIL released: when the stream's
// queue is full, enqueueing waits for the worker, and queued Python callbacks
// (Stream.launch) need the GIL to drain it.
template <typename Enqueue>
orError_t enqueueWithoutGil(Enqueue&& enqueue) {
  py::gil_scoped_release release;
  return enqueue();
}

// Buffers hold their memory through shared_ptr; asynchronous copies enqueue a
// no-op that owns another reference, so memory outlives the work using it
// even if the Python object is dropped first.
using SharedMemory = std::shared_ptr<void>;

// Without the GIL: a full device waits for queued work whose frees are pending,
// and that work may be Python callbacks (Stream.launch).
void* mallocWithoutGil(size_t bytes) {
  void* pointer = nullptr;
  py::gil_scoped_release release;
  checkStatus(orMalloc(&pointer, bytes));
  return pointer;
}

SharedMemory allocateDevice(size_t bytes, std::optional<int> device) {
  DeviceScope scope(device);
  return SharedMemory(mallocWithoutGil(bytes), [](void* p) { orFree(p); });
}

SharedMemory allocatePinned(size_t bytes) {
  void* pointer = nullptr;
  checkStatus(orMallocHost(&pointer, bytes));
  return SharedMemory(pointer, [](void* p) { orFreeHost(p); });
}

void keepAliveUntilDone(orStream_t stream, SharedMemory first, SharedMemory second) {
  checkStatus(openreg::launchHostFunc(stream, [first, second] {}));
}

class Stream;
class Event;

orStream_t handleOf(const std::optional<std::shared_ptr<Stream>>& stream);

// ---- Streams ---------------------------------------------------------------
class Stream {
 public:
  Stream(std::optional<int> device, int priority) : owned_(true) {
    DeviceScope scope(device);
    checkStatus(orStreamCreateWithPriority(&handle_, orStreamDefault, priority));
  }
  static std::shared_ptr<Stream> defaultOf(std::optional<int> device) {
    DeviceScope scope(device);
    orStream_t handle = nullptr;
    checkStatus(orStreamGetDefault(&handle));
    return std::shared_ptr<Stream>(new Stream(handle));
  }
  ~Stream() {
    if (owned_) orStreamDestroy(handle_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  orStream_t handle() const { return handle_; }
  int device() const {
    int device = 0;
    checkStatus(orStreamGetDevice(handle_, &device));
    return device;
  }
  int priority() const {
    int priority = 0;
    checkStatus(orStreamGetPriority(handle_, &priority));
    return priority;
  }
  bool query() const { return readiness(orStreamQuery(handle_)); }
  std::pair<unsigned long long, unsigned long long> progress() const {
    unsigned long long enqueued = 0, completed = 0;
    checkStatus(orStreamGetProgress(handle_, &enqueued, &completed));
    return {enqueued, completed};
  }
  void synchronize() const { checkStatus(orStreamSynchronize(handle_)); }
  void waitEvent(const Event& event) const;
  void waitStream(const Stream& other) const;
  std::shared_ptr<Event> recordEvent(std::shared_ptr<Event> event) const;
  void sleep(double seconds) const {
    // Checked before any conversion: casting inf, NaN or 1e300 seconds to an
    // integral duration is undefined behaviour (it used to enqueue no sleep).
    if (!(seconds >= 0 && seconds <= kMaxSleepSeconds)) {
      throw py::value_error(
          "sleep duration must be a number of seconds from 0 to 86400 (one day), got " +
          std::string(py::repr(py::float_(seconds))));
    }
    const auto duration = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(seconds));
    checkStatus(enqueueWithoutGil([&] {
      return openreg::launchHostFunc(handle_,
                                     [duration] { std::this_thread::sleep_for(duration); });
    }));
  }
  static constexpr double kMaxSleepSeconds = 86400;
  void launch(py::function function) const;

 private:
  explicit Stream(orStream_t handle) : handle_(handle), owned_(false) {}
  orStream_t handle_ = nullptr;
  bool owned_;
};

orStream_t handleOf(const std::optional<std::shared_ptr<Stream>>& stream) {
  return stream && *stream ? (*stream)->handle() : nullptr;
}

bool interpreterUsable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

void Stream::launch(py::function function) const {
  // The callable is owned through a raw pointer so that it is only ever
  // touched (called, destroyed) with the GIL held.
  auto* callable = new py::function(std::move(function));
  auto work = [callable] {
    if (!interpreterUsable()) throw std::runtime_error("the Python interpreter is shutting down");
    py::gil_scoped_acquire gil;
    std::unique_ptr<py::function> owned(callable);
    try {
      (*owned)();
    } catch (py::error_already_set& error) {
      std::string message = error.what();
      throw std::runtime_error(message);
    }
  };
  orError_t status = enqueueWithoutGil([&] { return openreg::launchHostFunc(handle_, work); });
  if (status != orSuccess) delete callable;
  checkStatus(status);
}

// ---- Events ----------------------------------------------------------------
class Event {
 public:
  Event(bool enableTiming, std::optional<int> device, bool interprocess) {
    DeviceScope scope(device);
    const unsigned flags = (enableTiming ? orEventDefault : orEventDisableTiming) |
                           (interprocess ? orEventInterprocess : 0u);
    checkStatus(orEventCreateWithFlags(&handle_, flags));
    timing_ = enableTiming;
  }
  // Another process's event (orIpcOpenEventHandle).
  static std::shared_ptr<Event> fromIpcHandle(const py::object& handle) {
    return std::shared_ptr<Event>(new Event(openreg_python::openIpcEventHandle(handle)));
  }
  ~Event() { orEventDestroy(handle_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  orEvent_t handle() const { return handle_; }
  bool timing() const { return timing_; }
  void record(const std::optional<std::shared_ptr<Stream>>& stream) const {
    orStream_t on = handleOf(stream);
    checkStatus(enqueueWithoutGil([&] { return orEventRecord(handle_, on); }));
  }
  bool query() const { return readiness(orEventQuery(handle_)); }
  void synchronize() const { checkStatus(orEventSynchronize(handle_)); }
  float elapsedTime(const Event& end) const {
    float milliseconds = 0;
    checkStatus(orEventElapsedTime(&milliseconds, handle_, end.handle_));
    return milliseconds;
  }

 private:
  explicit Event(orEvent_t imported) : handle_(imported) {}
  orEvent_t handle_ = nullptr;
  bool timing_ = false;
};

void Stream::waitEvent(const Event& event) const {
  checkStatus(enqueueWithoutGil([&] { return orStreamWaitEvent(handle_, event.handle(), 0); }));
}

std::shared_ptr<Event> Stream::recordEvent(std::shared_ptr<Event> event) const {
  if (!event) event = std::make_shared<Event>(false, device(), false);
  checkStatus(enqueueWithoutGil([&] { return orEventRecord(event->handle(), handle_); }));
  return event;
}

void Stream::waitStream(const Stream& other) const {
  // Same as CUDA: an event recorded on `other` that this stream waits for.
  waitEvent(*other.recordEvent(nullptr));
}

// ---- Host (pinned) buffers -------------------------------------------------
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes), memory_(allocatePinned(bytes)) {}
  void* data() const { return memory_.get(); }
  size_t nbytes() const { return bytes_; }
  const SharedMemory& memory() const { return memory_; }

 private:
  size_t bytes_;
  SharedMemory memory_;
};

// ---- Device buffers --------------------------------------------------------
class DeviceBuffer;

// A contiguous host region from a buffer-protocol object (or a HostBuffer).
struct HostRegion {
  void* data = nullptr;
  size_t bytes = 0;
  SharedMemory keepAlive;  // set for HostBuffer, whose copies may be async
  py::buffer_info info;    // holds the exporter's buffer while in use
};

HostRegion hostRegionOf(const py::object& object, bool writable) {
  HostRegion region;
  if (py::isinstance<HostBuffer>(object)) {
    const auto& pinned = object.cast<const HostBuffer&>();
    region.data = pinned.data();
    region.bytes = pinned.nbytes();
    region.keepAlive = pinned.memory();
    return region;
  }
  if (!PyObject_CheckBuffer(object.ptr())) {
    throw py::type_error(
        "expected a DeviceBuffer, HostBuffer or an object supporting the buffer "
        "protocol (bytes, bytearray, memoryview, array, numpy array), got " +
        std::string(py::str(py::type::of(object).attr("__name__"))));
  }
  region.info = py::reinterpret_borrow<py::buffer>(object).request(writable);
  if (region.info.size != 0 && !PyBuffer_IsContiguous(region.info.view(), 'C')) {
    throw py::value_error("the host buffer must be C-contiguous");
  }
  region.data = region.info.ptr;
  region.bytes = static_cast<size_t>(region.info.size * region.info.itemsize);
  return region;
}

class DeviceBuffer {
 public:
  DeviceBuffer(size_t bytes, std::optional<int> device)
      : bytes_(bytes),
        device_(device.value_or(currentDevice())),
        memory_(allocateDevice(bytes, device_)) {}

  uintptr_t ptr() const { return address(live().get()); }
  size_t nbytes() const { return bytes_; }
  int device() const { return device_; }
  bool freed() const { return freed_; }
  void free() {
    memory_.reset();
    freed_ = true;
  }

  void copyFrom(const py::object& source, size_t offset,
                const std::optional<std::shared_ptr<Stream>>& stream) {
    if (py::isinstance<DeviceBuffer>(source)) {
      const auto& other = source.cast<const DeviceBuffer&>();
      transfer(target(offset, other.bytes_), other.source(0, other.bytes_), other.bytes_,
               orMemcpyDeviceToDevice, stream, memory_, other.memory_);
      return;
    }
    HostRegion region = hostRegionOf(source, false);
    transfer(target(offset, region.bytes), region.data, region.bytes, orMemcpyHostToDevice, stream,
             memory_, region.keepAlive);
  }

  void copyTo(const py::object& destination, size_t offset,
              const std::optional<std::shared_ptr<Stream>>& stream) const {
    if (py::isinstance<DeviceBuffer>(destination)) {
      auto& other = destination.cast<DeviceBuffer&>();
      transfer(other.target(0, other.bytes_), source(offset, other.bytes_), other.bytes_,
               orMemcpyDeviceToDevice, stream, memory_, other.memory_);
      return;
    }
    HostRegion region = hostRegionOf(destination, true);
    transfer(region.data, source(offset, region.bytes), region.bytes, orMemcpyDeviceToHost, stream,
             memory_, region.keepAlive);
  }

  py::bytes toBytes(size_t offset, std::optional<size_t> count) const {
    const size_t length = count.value_or(offset <= bytes_ ? bytes_ - offset : 0);
    const void* from = source(offset, length);
    if (length == 0) return py::bytes();
    std::string host(length, '\0');
    {
      py::gil_scoped_release release;
      checkStatus(orMemcpy(host.data(), from, length, orMemcpyDeviceToHost));
    }
    return py::bytes(host);
  }

  void fill(int value) {
    if (value < 0 || value > 255) throw py::value_error("fill value must be a byte (0..255)");
    void* to = target(0, bytes_);
    py::gil_scoped_release release;
    checkStatus(orMemset(to, value, bytes_));
  }

  std::string repr() const {
    std::ostringstream text;
    text << "DeviceBuffer(nbytes=" << bytes_ << ", device=" << device_;
    if (memory_) text << ", ptr=0x" << std::hex << address(memory_.get());
    if (freed()) text << ", freed";
    text << ")";
    return text.str();
  }

 private:
  const SharedMemory& live() const {
    if (freed_) throw py::value_error("this DeviceBuffer was freed; allocate a new one");
    return memory_;
  }
  void checkRange(size_t offset, size_t count) const {
    if (offset > bytes_ || count > bytes_ - offset) {
      throw py::value_error("range of " + std::to_string(count) + " bytes at offset " +
                            std::to_string(offset) + " does not fit in a DeviceBuffer of " +
                            std::to_string(bytes_) + " bytes");
    }
  }
  void* target(size_t offset, size_t count) {
    checkRange(offset, count);
    return static_cast<char*>(live().get()) + offset;
  }
  const void* source(size_t offset, size_t count) const {
    checkRange(offset, count);
    return static_cast<const char*>(live().get()) + offset;
  }

  static void transfer(void* to, const void* from, size_t count, orMemcpyKind kind,
                       const std::optional<std::shared_ptr<Stream>>& stream, SharedMemory first,
                       SharedMemory second) {
    if (count == 0) return;
    py::gil_scoped_release release;
    if (!stream) {
      checkStatus(orMemcpy(to, from, count, kind));
      return;
    }
    orStream_t handle = handleOf(stream);
    checkStatus(orMemcpyAsync(to, from, count, kind, handle));
    keepAliveUntilDone(handle, std::move(first), std::move(second));
  }

  size_t bytes_;
  int device_;
  SharedMemory memory_;
  bool freed_ = false;
};

// ---- Pointer attributes ----------------------------------------------------
struct PointerAttributes {
  orMemoryType type;
  int device;
  uintptr_t devicePointer;
  uintptr_t hostPointer;
  uintptr_t allocationBase;
  size_t allocationSize;
};

PointerAttributes pointerAttributes(uintptr_t pointer) {
  orPointerAttributes raw{};
  checkStatus(orPointerGetAttributes(&raw, pointerFrom(pointer)));
  return PointerAttributes{raw.type,
                           raw.device,
                           address(raw.devicePointer),
                           address(raw.hostPointer),
                           address(raw.allocationBase),
                           raw.allocationSize};
}

// ---- Module ----------------------------------------------------------------
void defineEnums(py::module_& m) {
  py::native_enum<orMemcpyKind>(m, "MemcpyKind", "enum.IntEnum", "Direction of a raw memcpy.")
      .value("HOST_TO_HOST", orMemcpyHostToHost)
      .value("HOST_TO_DEVICE", orMemcpyHostToDevice)
      .value("DEVICE_TO_HOST", orMemcpyDeviceToHost)
      .value("DEVICE_TO_DEVICE", orMemcpyDeviceToDevice)
      .value("DEFAULT", orMemcpyDefault)
      .finalize();
  py::native_enum<orMemoryType>(m, "MemoryType", "enum.IntEnum",
                                "Kind of memory a pointer refers to.")
      .value("UNREGISTERED", orMemoryTypeUnregistered)
      .value("HOST", orMemoryTypeHost)
      .value("DEVICE", orMemoryTypeDevice)
      .finalize();
}

void defineDeviceFunctions(py::module_& m) {
  m.def(
      "device_count",
      [] {
        int count = 0;
        checkStatus(orGetDeviceCount(&count));
        return count;
      },
      "Number of OpenReg devices (OPENREG_DEVICE_COUNT, default 2).");
  m.def("current_device", &currentDevice, "Index of the calling thread's current device.");
  m.def(
      "set_device", [](int device) { checkStatus(orSetDevice(device)); }, py::arg("device"),
      "Make ``device`` the calling thread's current device.");
  m.def(
      "synchronize",
      [](std::optional<int> device) {
        DeviceScope scope(device);
        checkStatus(orDeviceSynchronize());
      },
      py::arg("device") = py::none(), py::call_guard<py::gil_scoped_release>(),
      "Wait for all work on every stream of ``device`` (default: the current one).\n\n"
      "Raises LaunchFailureError if queued work failed, and NotPermittedError when called\n"
      "inside work running on a stream.");
  m.def(
      "mem_get_info",
      [](std::optional<int> device) {
        DeviceScope scope(device);
        size_t free = 0, total = 0;
        checkStatus(orMemGetInfo(&free, &total));
        return py::make_tuple(free, total);
      },
      py::arg("device") = py::none(),
      "``(free, total)`` bytes of ``device`` (default: the current one).");
  m.def(
      "stream_priority_range",
      [] {
        int least = 0, greatest = 0;
        checkStatus(orDeviceGetStreamPriorityRange(&least, &greatest));
        return py::make_tuple(least, greatest);
      },
      "``(least, greatest)`` stream priority: ``(0, -2)``; lower numbers mean higher priority.");
  m.def(
      "runtime_version",
      [] {
        int version = 0;
        checkStatus(orRuntimeGetVersion(&version));
        return version;
      },
      "Runtime version as ``major * 1000 + minor * 10``.");
}

void defineRawMemoryFunctions(py::module_& m) {
  m.def(
      "malloc",
      [](size_t size, std::optional<int> device) {
        DeviceScope scope(device);
        return address(mallocWithoutGil(size));
      },
      py::arg("size"), py::arg("device") = py::none(),
      "Allocate ``size`` bytes of device memory; returns its address (0 for size 0).\n\n"
      "The address is not host-accessible. Free it with ``free``.");
  m.def(
      "free", [](uintptr_t pointer) { checkStatus(orFree(pointerFrom(pointer))); }, py::arg("ptr"),
      "Free device memory from ``malloc``. Returns at once; the memory is reused only after\n"
      "the work queued before the call (on any stream) has completed.");
  m.def(
      "malloc_host",
      [](size_t size) {
        void* pointer = nullptr;
        checkStatus(orMallocHost(&pointer, size));
        return address(pointer);
      },
      py::arg("size"), "Allocate ``size`` bytes of pinned host memory; returns its address.");
  m.def(
      "free_host", [](uintptr_t pointer) { checkStatus(orFreeHost(pointerFrom(pointer))); },
      py::arg("ptr"),
      "Free pinned host memory from ``malloc_host`` (stream-ordered, like ``free``).");
  m.def(
      "memcpy",
      [](uintptr_t dst, uintptr_t src, size_t count, orMemcpyKind kind) {
        checkStatus(orMemcpy(pointerFrom(dst), pointerFrom(src), count, kind));
      },
      py::arg("dst"), py::arg("src"), py::arg("count"), py::arg("kind"),
      py::call_guard<py::gil_scoped_release>(),
      "Copy ``count`` bytes between raw addresses; returns when the copy is complete.");
  m.def(
      "memcpy_async",
      [](uintptr_t dst, uintptr_t src, size_t count, orMemcpyKind kind,
         std::optional<std::shared_ptr<Stream>> stream) {
        py::gil_scoped_release release;
        checkStatus(
            orMemcpyAsync(pointerFrom(dst), pointerFrom(src), count, kind, handleOf(stream)));
      },
      py::arg("dst"), py::arg("src"), py::arg("count"), py::arg("kind"),
      py::arg("stream") = py::none(),
      "Copy ordered on ``stream`` (default: the current device's default stream).\n\n"
      "Asynchronous when the host side is pinned (or both are device memory); with\n"
      "pageable host memory it completes before returning.");
  m.def(
      "memset",
      [](uintptr_t pointer, int value, size_t count) {
        checkStatus(orMemset(pointerFrom(pointer), value, count));
      },
      py::arg("ptr"), py::arg("value"), py::arg("count"), py::call_guard<py::gil_scoped_release>(),
      "Fill ``count`` bytes of device memory with the byte ``value`` (synchronous).");
  py::class_<PointerAttributes>(m, "PointerAttributes",
                                "What kind of memory an address is (see ``pointer_attributes``).")
      .def_readonly("type", &PointerAttributes::type, "A ``MemoryType``.")
      .def_readonly("device", &PointerAttributes::device, "Owning device, or -1 for host memory.")
      .def_readonly("device_pointer", &PointerAttributes::devicePointer,
                    "The address itself for device memory, else 0.")
      .def_readonly("host_pointer", &PointerAttributes::hostPointer,
                    "The address itself for pinned host memory, else 0.")
      .def_readonly("allocation_base", &PointerAttributes::allocationBase,
                    "Start of the containing allocation (0 if unregistered).")
      .def_readonly("allocation_size", &PointerAttributes::allocationSize,
                    "Size in bytes of the containing allocation (0 if unregistered).");
  m.def("pointer_attributes", &pointerAttributes, py::arg("ptr"),
        "Classify any address: device, pinned host or ordinary (unregistered) memory.");
}

void defineStreamsAndEvents(py::module_& m) {
  py::class_<Stream, std::shared_ptr<Stream>>(
      m, "Stream",
      "A queue of work that runs in order on its own worker thread, asynchronously to the host.\n\n"
      "``Stream(device=None, priority=0)`` creates one on ``device`` (default: the current\n"
      "device); priorities range from 0 (least) to -2 (greatest). ``Stream.default()`` is a\n"
      "device's default stream.")
      .def(py::init<std::optional<int>, int>(), py::arg("device") = py::none(),
           py::arg("priority") = 0)
      .def_static("default", &Stream::defaultOf, py::arg("device") = py::none(),
                  "The default stream of ``device`` (default: the current device).")
      .def_property_readonly(
          "handle", [](const Stream& s) { return address(s.handle()); },
          "The ``orStream_t`` as an int.")
      .def_property_readonly("device", &Stream::device, "Index of the stream's device.")
      .def_property_readonly("priority", &Stream::priority, "The stream's priority (0, -1 or -2).")
      .def(
          "query", &Stream::query,
          "True if all work on the stream has completed; raises LaunchFailureError if some failed.")
      .def("progress", &Stream::progress,
           "``(enqueued, completed)``: operations queued on the stream so far and how many\n"
           "have completed (in order), as orStreamGetProgress reports them.")
      .def(
          "synchronize", &Stream::synchronize, py::call_guard<py::gil_scoped_release>(),
          "Wait for all work queued on the stream; raises LaunchFailureError if some failed.\n\n"
          "Inside work running on a stream it raises NotPermittedError instead of waiting forever.")
      .def("wait_event", &Stream::waitEvent, py::arg("event"),
           "Later work on this stream waits for the event's most recent record.")
      .def("wait_stream", &Stream::waitStream, py::arg("stream"),
           "Later work on this stream waits for the work queued on ``stream`` so far.")
      .def("record_event", &Stream::recordEvent, py::arg("event") = py::none(),
           "Record ``event`` (default: a new non-timing Event) on this stream and return it.")
      .def("sleep", &Stream::sleep, py::arg("seconds"),
           "Enqueue work that sleeps ``seconds`` (0 to 86400) on the worker.")
      .def("launch", &Stream::launch, py::arg("function"),
           "Enqueue a Python callable; an exception it raises surfaces at the next synchronizing\n"
           "call as LaunchFailureError.")
      .def("__eq__",
           [](const Stream& self, const py::object& other) {
             return py::isinstance<Stream>(other) &&
                    other.cast<const Stream&>().handle() == self.handle();
           })
      .def("__hash__", [](const Stream& s) { return std::hash<const void*>()(s.handle()); });
  py::class_<Event, std::shared_ptr<Event>>(
      m, "Event",
      "A point in a stream's work: record it, wait for it, time between two.\n\n"
      "``Event(enable_timing=False, device=None, interprocess=False)``; record with\n"
      "``record`` or ``Stream.record_event``. An interprocess event (which cannot time)\n"
      "can be waited for by other processes: see ``ipc_handle``.")
      .def(py::init<bool, std::optional<int>, bool>(), py::arg("enable_timing") = false,
           py::arg("device") = py::none(), py::arg("interprocess") = false)
      .def(
          "ipc_handle", [](const Event& e) { return openreg_python::eventIpcHandle(e.handle()); },
          "An ``IpcEventHandle`` for another process (``Event.from_ipc_handle`` there).")
      .def_static("from_ipc_handle", &Event::fromIpcHandle, py::arg("handle"),
                  "Another process's interprocess event: wait for it, query or synchronize it\n"
                  "(its latest record there at the time); it cannot be recorded here.")
      .def_property_readonly(
          "handle", [](const Event& e) { return address(e.handle()); },
          "The ``orEvent_t`` as an int.")
      .def_property_readonly("enable_timing", &Event::timing, "Whether the event records time.")
      .def("record", &Event::record, py::arg("stream") = py::none(),
           "Record on ``stream`` (default: the default stream of the current device).")
      .def("query", &Event::query,
           "True once the most recent record has completed (or if never recorded).")
      .def("synchronize", &Event::synchronize, py::call_guard<py::gil_scoped_release>(),
           "Wait for the most recent record; raises NotPermittedError inside stream work.")
      .def("elapsed_time", &Event::elapsedTime, py::arg("end"),
           "Milliseconds from this event's record to ``end``'s (both timing events, completed).");
}

void defineBuffers(py::module_& m) {
  py::class_<HostBuffer, std::shared_ptr<HostBuffer>>(
      m, "HostBuffer", py::buffer_protocol(),
      "Pinned host memory of ``nbytes`` bytes, exposed through the buffer protocol.\n\n"
      "Copies between pinned memory and the device may run asynchronously. The memory\n"
      "outlives the object until the work queued before it was dropped has completed.")
      .def(py::init<size_t>(), py::arg("nbytes"))
      .def_property_readonly(
          "ptr", [](const HostBuffer& b) { return address(b.data()); }, "Address of the memory.")
      .def_property_readonly("nbytes", &HostBuffer::nbytes, "Size in bytes.")
      .def("__len__", &HostBuffer::nbytes)
      .def_buffer([](HostBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.nbytes())}, {1});
      });
  py::class_<DeviceBuffer, std::shared_ptr<DeviceBuffer>>(
      m, "DeviceBuffer",
      "``nbytes`` bytes of device memory on ``device`` (default: the current device).\n\n"
      "Host code cannot read ``ptr``; copy with ``copy_from``/``copy_to``/``to_bytes``. Use it\n"
      "as a context manager, or call ``free``, to release it before it is garbage-collected.")
      .def(py::init<size_t, std::optional<int>>(), py::arg("nbytes"),
           py::arg("device") = py::none())
      .def_property_readonly("ptr", &DeviceBuffer::ptr, "Device address (not host-accessible).")
      .def_property_readonly("nbytes", &DeviceBuffer::nbytes, "Size in bytes.")
      .def_property_readonly("device", &DeviceBuffer::device, "Index of the owning device.")
      .def_property_readonly("freed", &DeviceBuffer::freed, "True after ``free``.")
      .def("__len__", &DeviceBuffer::nbytes)
      .def("copy_from", &DeviceBuffer::copyFrom, py::arg("source"), py::kw_only(),
           py::arg("offset") = 0, py::arg("stream") = py::none(),
           "Copy all of ``source`` (a DeviceBuffer, HostBuffer or buffer-protocol object) to\n"
           "``offset``. Synchronous without ``stream``; ordered on ``stream`` with one\n"
           "(asynchronous from pinned memory).")
      .def("copy_to", &DeviceBuffer::copyTo, py::arg("destination"), py::kw_only(),
           py::arg("offset") = 0, py::arg("stream") = py::none(),
           "Fill all of ``destination`` (a DeviceBuffer, HostBuffer or writable buffer-protocol\n"
           "object) from ``offset``; synchronous without ``stream``, as ``copy_from``.")
      .def("to_bytes", &DeviceBuffer::toBytes, py::arg("offset") = 0, py::arg("count") = py::none(),
           "The contents (from ``offset``, ``count`` bytes or to the end) as ``bytes``.")
      .def("fill", &DeviceBuffer::fill, py::arg("value"), "Set every byte to ``value`` (0..255).")
      .def("free", &DeviceBuffer::free,
           "Release the memory now (stream-ordered: queued work using it still completes).")
      .def("__enter__", [](std::shared_ptr<DeviceBuffer> self) { return self; })
      .def("__exit__", [](DeviceBuffer& self, py::args) { self.free(); })
      .def("__repr__", &DeviceBuffer::repr);
}

struct ProcessUsage {
  int pid;
  int device;
  unsigned long long startTime;
  std::string name;
  size_t bytesInUse;
  size_t capacity;
  unsigned utilization;
};

// Asks with a growing array until every entry fit (processes may register
// between the two calls).
std::vector<ProcessUsage> processUsage() {
  std::vector<orProcessUsage> raw(16);
  for (;;) {
    unsigned count = static_cast<unsigned>(raw.size());
    checkStatus(orGetProcessUsage(raw.data(), &count));
    if (count <= raw.size()) {
      raw.resize(count);
      break;
    }
    raw.resize(count * 2);
  }
  std::vector<ProcessUsage> usage;
  for (const orProcessUsage& entry : raw) {
    usage.push_back(ProcessUsage{entry.pid, entry.device, entry.startTime,
                                 std::string(entry.name, strnlen(entry.name, sizeof entry.name)),
                                 entry.bytesInUse, entry.capacity, entry.utilization});
  }
  return usage;
}

// A process name is whatever bytes the process gave itself (prctl, or
// /proc/self/comm), read from a record other processes can write: decoded
// leniently, so that no name can make a listing fail.
py::str decodedName(const std::string& name) {
  PyObject* text =
      PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "replace");
  if (text == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

void defineRegistry(py::module_& m) {
  m.def(
      "device_total_memory",
      [](int device) {
        size_t bytes = 0;
        checkStatus(orDeviceTotalMem(&bytes, device));
        return bytes;
      },
      py::arg("device"),
      "Capacity of ``device`` in bytes, without activating it (``OPENREG_DEVICE_MEMORY``).");
  py::class_<ProcessUsage>(m, "ProcessUsage",
                           "One process's use of one device, from the process registry.")
      .def_readonly("pid", &ProcessUsage::pid)
      .def_readonly("device", &ProcessUsage::device)
      .def_readonly("start_time", &ProcessUsage::startTime,
                    "Start time of the process in clock ticks after boot (/proc/<pid>/stat).")
      .def_property_readonly(
          "name", [](const ProcessUsage& self) { return decodedName(self.name); },
          "Process name (/proc/<pid>/comm; bytes that are not UTF-8 read as U+FFFD).")
      .def_readonly("bytes_in_use", &ProcessUsage::bytesInUse,
                    "Device memory the process has allocated (page multiples).")
      .def_readonly("capacity", &ProcessUsage::capacity, "The device's capacity in that process.")
      .def_readonly("utilization", &ProcessUsage::utilization,
                    "Percent of the last second in which the process ran work on the device.")
      .def("__repr__", [](const ProcessUsage& self) {
        std::ostringstream text;
        text << "ProcessUsage(pid=" << self.pid << ", device=" << self.device
             << ", name=" << std::string(py::repr(decodedName(self.name)))
             << ", bytes_in_use=" << self.bytesInUse << ", utilization=" << self.utilization << ")";
        return text.str();
      });
  m.def("process_usage", &processUsage, py::call_guard<py::gil_scoped_release>(),
        "Every live process of this user using a device, one entry per (process, device),\n"
        "ordered by device then pid (the registry openreg-smi reads; never activates a\n"
        "device). Raises NotPermittedError when the registry directory is not private.");
  m.attr("UTILIZATION_WINDOW_MS") = OPENREG_UTILIZATION_WINDOW_MS;
}

}  // namespace

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "Low-level bindings of the OpenReg runtime C API (use openreg_runtime instead).";
  py::register_exception_translator(&translateStatusError);
  defineEnums(m);
  defineDeviceFunctions(m);
  defineRawMemoryFunctions(m);
  defineStreamsAndEvents(m);
  defineBuffers(m);
  defineRegistry(m);
  openreg_python::defineIpc(m);
}
