/*
 * openreg.h — C API of the OpenReg simulated accelerator runtime.
 *
 * This header is the only contract between the runtime (libopenreg.so) and
 * its users, including the PyTorch binding. Names follow the CUDA runtime
 * with an `or` prefix so that habits and tools carry over.
 *
 * Conventions
 *  - Every function returns an orError_t; orSuccess (0) means success. A
 *    failing call also stores its code and a human-readable message in the
 *    calling thread's "last error" (orGetLastError / orGetLastErrorMessage).
 *  - Every function is thread-safe.
 *  - The "current device" is per host thread and starts at 0.
 *  - A NULL orStream_t means the default stream of the current device.
 *  - Device memory is host-inaccessible: dereferencing a device pointer from
 *    host code faults (the runtime prints a diagnostic line and re-raises
 *    SIGSEGV). Work that the runtime runs on a stream (orLaunchHostFunc,
 *    orMemcpy*) reaches the same bytes through orGetKernelPointer.
 *  - After fork(), the child process cannot use the runtime (every call
 *    returns orErrorInitialization), as with CUDA; use a spawned process.
 *  - Calls that wait for stream work (the *Synchronize functions, orMemcpy,
 *    orMemset, orMemcpyAsync with pageable memory) return orErrorNotPermitted
 *    when called from inside work running on a stream: that work could be
 *    what they wait for.
 *
 * Environment
 *  OPENREG_DEVICE_COUNT   number of devices, 1..16 (default 2)
 *  OPENREG_DEVICE_MEMORY  capacity of each device, 1 MiB to 1 TiB, e.g. "8GiB",
 *                         "512MiB", or "1073741824" (a bare number is bytes)
 *                         (default: a quarter of physical RAM)
 *  OPENREG_FAULT_MALLOC   fault injection: call numbers (counted from 1, e.g.
 *  OPENREG_FAULT_MEMCPY   "3" or "3,4") of orMalloc / orMemcpy* / orLaunchHostFunc
 *  OPENREG_FAULT_LAUNCH   calls that fail with orErrorOutOfMemory (malloc) or
 *                         orErrorLaunchFailure (a copy copies nothing; launched
 *                         work still runs, then is reported failed)
 *  All are read once, on the first call that needs the devices.
 *  OPENREG_REGISTRY_DIR   directory of the process registry (see "Process
 *                         registry" below; default /dev/shm/openreg-<uid>),
 *                         read when a device is activated or listed.
 */
#ifndef OPENREG_H_
#define OPENREG_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of the C API are exported from libopenreg.so; everything else in
 * the library is hidden (it is built with -fvisibility=hidden). */
#if defined(__GNUC__)
#define OR_API __attribute__((visibility("default")))
#else
#define OR_API
#endif

/* The enums below are int-sized in C. C++ gives them the fixed underlying
 * type int, so that any int a C caller passes (say orMemcpyKind 1000, which
 * the runtime rejects) is a valid value rather than undefined behaviour. The
 * layout is the same in both languages. */
#ifdef __cplusplus
#define OR_ENUM_TYPE : int
#else
#define OR_ENUM_TYPE
#endif

#define OPENREG_VERSION_MAJOR 0
#define OPENREG_VERSION_MINOR 1
#define OPENREG_MAX_DEVICES 16

/* Error codes. Values are stable: they are part of the ABI. */
typedef enum orError OR_ENUM_TYPE {
  orSuccess = 0,
  orErrorInvalidValue = 1,           /* bad argument: NULL, range, flags */
  orErrorOutOfMemory = 2,            /* device capacity exhausted */
  orErrorInitialization = 3,         /* bad environment, or used after fork */
  orErrorInvalidDevice = 4,          /* device index out of range */
  orErrorInvalidDevicePointer = 5,   /* not (the start of) a live device allocation */
  orErrorInvalidHostPointer = 6,     /* not a live pinned host allocation */
  orErrorInvalidMemcpyDirection = 7, /* kind does not match the pointers */
  orErrorNotReady = 8,               /* queried work has not completed */
  orErrorInvalidResourceHandle = 9,  /* unknown or destroyed stream/event */
  orErrorDeviceMismatch = 10,        /* stream and event on different devices */
  orErrorLaunchFailure = 11,         /* work enqueued on a stream failed */
  orErrorNotPermitted = 12,          /* e.g. elapsed time of a non-timing event */
  orErrorUnknown = 999
} orError_t;

typedef enum orMemcpyKind OR_ENUM_TYPE {
  orMemcpyHostToHost = 0,
  orMemcpyHostToDevice = 1,
  orMemcpyDeviceToHost = 2,
  orMemcpyDeviceToDevice = 3,
  orMemcpyDefault = 4 /* inferred from the pointers */
} orMemcpyKind;

typedef enum orMemoryType OR_ENUM_TYPE {
  orMemoryTypeUnregistered = 0, /* ordinary (pageable) host memory */
  orMemoryTypeHost = 1,         /* pinned host memory from orMallocHost */
  orMemoryTypeDevice = 2        /* device memory from orMalloc */
} orMemoryType;

typedef struct orPointerAttributes {
  orMemoryType type;
  int device;            /* owning device, or -1 for host memory */
  void* devicePointer;   /* the pointer itself for device memory, else NULL */
  void* hostPointer;     /* the pointer itself for pinned host memory, else NULL */
  void* allocationBase;  /* start of the containing allocation (NULL if unregistered) */
  size_t allocationSize; /* its size in bytes (0 if unregistered) */
} orPointerAttributes;

typedef struct orStream* orStream_t; /* opaque */
typedef struct orEvent* orEvent_t;   /* opaque */

/* Flags for orStreamCreateWithPriority and orEventCreateWithFlags. */
#define orStreamDefault 0x0u
#define orStreamNonBlocking 0x1u
#define orEventDefault 0x0u
#define orEventDisableTiming 0x2u
#define orEventInterprocess 0x4u /* shareable with other processes (orIpcGetEventHandle) */

/* ---- Errors ------------------------------------------------------------- */
OR_API const char* orGetErrorName(orError_t error);
OR_API const char* orGetErrorString(orError_t error);
/* Returns the calling thread's last error and resets it to orSuccess. */
OR_API orError_t orGetLastError(void);
/* Returns the calling thread's last error without resetting it. */
OR_API orError_t orPeekAtLastError(void);
/* Detail message of the calling thread's last error ("" if none). The pointer
 * stays valid until the thread's next failing call. */
OR_API const char* orGetLastErrorMessage(void);

/* ---- Devices ------------------------------------------------------------ */
OR_API orError_t orGetDeviceCount(int* count);
OR_API orError_t orSetDevice(int device);
OR_API orError_t orGetDevice(int* device);
/* Waits for all work on every stream of the current device. Reports (and
 * clears) the first failure of work on those streams. */
OR_API orError_t orDeviceSynchronize(void);

/* ---- Memory ------------------------------------------------------------- */
/* Allocates `size` bytes on the current device (page-granular; size 0 gives
 * NULL). Returns orErrorOutOfMemory beyond the device's capacity. */
OR_API orError_t orMalloc(void** devPtr, size_t size);
/* Frees a device allocation; NULL is a no-op. Stream-ordered: returns at once
 * and the pointer is invalid from then on, but the memory is reused (and its
 * pages go back to the OS) only once all work queued before the call, on any
 * stream of any device, has completed. orMalloc waits for such pending frees
 * before reporting orErrorOutOfMemory. Unlike cudaFree it never synchronizes,
 * so it may be called inside stream work; there, the calling stream is ordered
 * at the running work (as cudaFreeAsync on it would be): the work queued
 * behind it on the same stream runs after the free in stream order and is not
 * waited for, so memory freed by the last user's work can be reused at once. */
OR_API orError_t orFree(void* devPtr);
/* Pinned host memory: copies between it and a device may be asynchronous.
 * orFreeHost is stream-ordered like orFree (inside stream work too). */
OR_API orError_t orMallocHost(void** ptr, size_t size);
OR_API orError_t orFreeHost(void* ptr);
/* Free and total bytes of the current device. */
OR_API orError_t orMemGetInfo(size_t* free, size_t* total);
/* Classifies any pointer; interior pointers resolve to their allocation.
 * Unknown pointers are reported as orMemoryTypeUnregistered (not an error). */
OR_API orError_t orPointerGetAttributes(orPointerAttributes* attributes, const void* ptr);
/* Synchronous copy: ordered after earlier work on the default stream of the
 * device involved, returns when the copy is complete. */
OR_API orError_t orMemcpy(void* dst, const void* src, size_t count, orMemcpyKind kind);
/* Copy ordered on `stream`. Asynchronous to the host when the host side is
 * pinned (or both sides are device memory); with pageable host memory it
 * completes before returning, like CUDA. Ranges are checked against device and
 * pinned allocations (orErrorInvalidValue when a side would overrun). */
OR_API orError_t orMemcpyAsync(void* dst, const void* src, size_t count, orMemcpyKind kind,
                               orStream_t stream);
/* Synchronous fill of device memory with a byte value. */
OR_API orError_t orMemset(void* devPtr, int value, size_t count);
OR_API orError_t orMemsetAsync(void* devPtr, int value, size_t count, orStream_t stream);

/* Translates a device pointer (interior pointers included) to the address
 * through which work running on a stream reaches the same bytes. Valid ONLY
 * inside work the runtime runs (orLaunchHostFunc callbacks); host code that
 * keeps using it elsewhere breaks the device-memory model. The translation is
 * a constant per-device offset and takes no lock. */
OR_API orError_t orGetKernelPointer(void** kernelPtr, const void* devPtr);
/* The inverse translation. */
OR_API orError_t orGetDevicePointer(void** devPtr, const void* kernelPtr);

/* Where a device's memory lives: device addresses are [deviceBase,
 * deviceBase + size) and kernel-view addresses [kernelBase, kernelBase +
 * size); orGetKernelPointer adds kernelBase - deviceBase. size is twice the
 * capacity: the device's own memory, then the window where memory imported
 * from other processes is mapped (orIpcOpenMemHandle). Both ranges are
 * fixed for the life of the process, so a caller on a hot path may cache them
 * to translate pointers without a call, or to tell a kernel-view address from
 * host memory without a failing call. Activates the device. */
typedef struct orDeviceAddressRange {
  void* deviceBase;
  void* kernelBase;
  size_t size;
} orDeviceAddressRange;
OR_API orError_t orDeviceGetAddressRange(orDeviceAddressRange* range, int device);

/* ---- Streams ------------------------------------------------------------ */
/* Priorities range from 0 (least, the default) to -2 (greatest); lower
 * numbers mean higher priority, as in CUDA. */
OR_API orError_t orDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority);
OR_API orError_t orStreamCreate(orStream_t* stream);
OR_API orError_t orStreamCreateWithPriority(orStream_t* stream, unsigned int flags, int priority);
/* Releases the handle at once; queued work still runs to completion. The
 * default stream (NULL) cannot be destroyed. */
OR_API orError_t orStreamDestroy(orStream_t stream);
/* orSuccess if all work on the stream has completed, orErrorNotReady if not. */
OR_API orError_t orStreamQuery(orStream_t stream);
OR_API orError_t orStreamSynchronize(orStream_t stream);
/* Later work on `stream` waits for the event's most recent record. The event
 * may belong to another device (cross-device ordering). flags must be 0. */
OR_API orError_t orStreamWaitEvent(orStream_t stream, orEvent_t event, unsigned int flags);
OR_API orError_t orStreamGetPriority(orStream_t stream, int* priority);
OR_API orError_t orStreamGetDevice(orStream_t stream, int* device);
/* The current device's default stream as a real handle (never NULL). */
OR_API orError_t orStreamGetDefault(orStream_t* stream);

/* How far a stream has come: the number of operations (launched work, copies,
 * fills, event waits) enqueued on it so far, and how many of them have
 * completed. Operations complete in order, so the N-th has completed once
 * *completed >= N. Inside work running on the stream, *completed counts the
 * operations before it. Either output may be NULL. For bookkeeping in stream
 * order without an event per point: a caching allocator notes *enqueued when
 * memory is freed and knows that the work queued before the free has run
 * once *completed reaches it. */
OR_API orError_t orStreamGetProgress(orStream_t stream, unsigned long long* enqueued,
                                     unsigned long long* completed);

/* Runs fn(userData) on the stream's worker thread, after all earlier work
 * on the stream. A callback reports failure with orSetKernelError; the
 * failure surfaces on the next synchronizing call on that stream. */
typedef void (*orHostFn_t)(void* userData);
OR_API orError_t orLaunchHostFunc(orStream_t stream, orHostFn_t fn, void* userData);
/* Called from inside a callback run by orLaunchHostFunc: marks it failed.
 * Outside a callback it returns orErrorNotPermitted. */
OR_API orError_t orSetKernelError(const char* message);

/* ---- Events ------------------------------------------------------------- */
OR_API orError_t orEventCreate(orEvent_t* event);
/* flags: orEventDefault, orEventDisableTiming, and orEventInterprocess, which
 * (as in CUDA) needs orEventDisableTiming too. */
OR_API orError_t orEventCreateWithFlags(orEvent_t* event, unsigned int flags);
/* Records on `stream`; the stream must belong to the event's device (the
 * device current when the event was created). */
OR_API orError_t orEventRecord(orEvent_t event, orStream_t stream);
/* orSuccess once the most recent record completed (or if never recorded),
 * orErrorNotReady before. */
OR_API orError_t orEventQuery(orEvent_t event);
OR_API orError_t orEventSynchronize(orEvent_t event);
/* Milliseconds between two completed records of timing-enabled events. */
OR_API orError_t orEventElapsedTime(float* ms, orEvent_t start, orEvent_t end);
OR_API orError_t orEventDestroy(orEvent_t event);

/* ---- Interprocess communication (IPC) ------------------------------------ */
/* Device memory and events can be shared with other processes of the same
 * user, as with CUDA's IPC API, without copying: the importing process maps
 * the exporter's device memory into the import window of its own device with
 * the same index, and treats it as device memory of that device (pointer
 * attributes, copies, kernels through orGetKernelPointer, the host-access
 * diagnostic). Each process still runs its own simulated device: what is
 * shared is the memory, and order across processes comes only from
 * interprocess events.
 *
 * Handles carry a file descriptor, valid in the process that holds it. To
 * hand a handle to another process, send the descriptor over a Unix-domain
 * socket (SCM_RIGHTS; from Python, multiprocessing.reduction.send_handle or
 * DupFd) and the other fields as bytes, then store the received descriptor's
 * number in `fd`. orIpcGet*Handle give the caller a new descriptor, which the
 * caller closes (close(2)) once it was sent or is not needed;
 * orIpcOpen*Handle do not take ownership of handle.fd (the import keeps what
 * it needs; close yours afterwards). The descriptors are close-on-exec.
 *
 * Lifetime of shared memory: a memory handle holds a lease on its range for
 * as long as its descriptor, any copy of it (in flight through a socket, or
 * received by another process) or an import opened from it exists; the
 * kernel drops the lease when the last of them goes, also when the process
 * holding it is killed. While a lease remains the exporter's orFree still
 * ends the allocation for the API, but its memory is not reused or returned
 * to the system until every lease is gone (checked at orMalloc and
 * orMemGetInfo): importers never see their bytes change owner. An exporter
 * that exits leaves imported memory valid in the importers until they close
 * it. orIpcMemQuery tells whether leases on a range remain, for an allocator
 * that must not reuse a block it sent until its receivers let go.
 *
 * Lifetime of shared events: an imported event stays usable after the
 * exporter destroys its event (then every record of it has completed). If
 * the exporter exits before a record that an importer waits for completed,
 * the wait fails (orErrorLaunchFailure naming the process) instead of
 * waiting forever.
 */
typedef struct orIpcMemHandle_st {
  int fd;                      /* descriptor of the exporting device's memory file */
  int device;                  /* device index; imports map into this process's same index */
  unsigned long long memoryId; /* identifies the memory file: equal memoryId, offset and
                                  size name the same bytes, whichever process exported them */
  unsigned long long offset;   /* first byte of the range in that file */
  unsigned long long size;     /* bytes in the range */
  int exporterPid;             /* the process whose device allocated the memory */
  int reserved0;
  unsigned long long reserved[3];
} orIpcMemHandle_t;

typedef struct orIpcEventHandle_st {
  int fd;                   /* descriptor of the exporting process's event file */
  int device;               /* the event's device */
  unsigned long long slot;  /* where the event's state lies in that file */
  unsigned long long epoch; /* which event occupies the slot */
  int exporterPid;          /* the process that created the event */
  int reserved0;
  unsigned long long reserved[4];
} orIpcEventHandle_t;

/* Accepted by orIpcOpenMemHandle for CUDA compatibility; no effect. */
#define orIpcMemLazyEnablePeerAccess 0x1u

/* A handle for the whole allocation that starts at devPtr: memory from
 * orMalloc, or memory imported with orIpcOpenMemHandle (re-exporting it). */
OR_API orError_t orIpcGetMemHandle(orIpcMemHandle_t* handle, void* devPtr);
/* A handle for [devPtr, devPtr + size), which must lie inside one live
 * allocation (or import): what a caching allocator sends for one block of a
 * larger allocation. The lease covers exactly this range. */
OR_API orError_t orIpcGetMemRangeHandle(orIpcMemHandle_t* handle, void* devPtr, size_t size);
/* Maps the handle's range into this process and returns its device pointer
 * in *devPtr. Opening a range that is already open returns the same pointer
 * (each open is closed once). flags: 0 or orIpcMemLazyEnablePeerAccess.
 * orErrorInvalidValue when handle.fd is not a descriptor of exported OpenReg
 * device memory or the range lies outside it; orErrorInvalidDevice when this
 * process has no device with the handle's index; orErrorOutOfMemory when the
 * import window of that device is full. */
OR_API orError_t orIpcOpenMemHandle(void** devPtr, orIpcMemHandle_t handle, unsigned int flags);
/* Ends one open of devPtr (a pointer orIpcOpenMemHandle returned). At the
 * last one the pointer is invalid at once and the mapping goes, with its
 * lease, once the work queued before the call has completed (stream-ordered,
 * like orFree). */
OR_API orError_t orIpcCloseMemHandle(void* devPtr);
/* orSuccess when no lease held by anyone else remains on any byte of
 * [devPtr, devPtr + size) (size 0: the whole allocation containing devPtr),
 * orErrorNotReady while one does. Works on exported memory and on imports. */
OR_API orError_t orIpcMemQuery(const void* devPtr, size_t size);
/* A handle for an event created with orEventInterprocess | orEventDisableTiming
 * (orErrorInvalidResourceHandle otherwise, as in CUDA), or for an imported one. */
OR_API orError_t orIpcGetEventHandle(orIpcEventHandle_t* handle, orEvent_t event);
/* Opens another process's event as a new event handle (destroy it with
 * orEventDestroy). It can be waited for (orStreamWaitEvent, which waits for
 * the exporter's latest record at the time of the call), synchronized and
 * queried, but not recorded (orErrorNotPermitted): record it in the process
 * that created it. */
OR_API orError_t orIpcOpenEventHandle(orEvent_t* event, orIpcEventHandle_t handle);

/* Capacity of `device` in bytes (what orMemGetInfo reports as total), without
 * activating it: for tools that must not become users of the device. */
OR_API orError_t orDeviceTotalMem(size_t* bytes, int device);

/* ---- Process registry (what openreg-smi shows) -------------------------- */
/* A process that activates a device publishes, for each device it activated,
 * its bytes in use and busy time in a per-user directory: by default
 * /dev/shm/openreg-<uid> (mode 0700, files 0600), or OPENREG_REGISTRY_DIR.
 * Only this user's processes are listed: other users can neither read nor
 * write the directory. Stored are pid, start time, process name and the
 * counters below; nothing else. Records of processes that ended, including
 * killed ones and zombies (exited, not yet reaped), are removed by the next
 * reader (a pid is matched with its start time, so a reused pid is not
 * mistaken for the old process). The directory's contents are untrusted
 * input: files that are not regular files of this user (a FIFO, a link) are
 * skipped without blocking, and an entry whose counters could not be true (a
 * record overwritten in shared memory) is left out until its owner, which
 * never reads its record back, rewrites it.
 *
 * utilization is the percentage of the last OPENREG_UTILIZATION_WINDOW_MS in
 * which at least one stream of the device was running work in that process
 * (the window is extended by up to an eighth: the busy time is sampled at
 * the start and end of work, at most 8 times per window). */
#define OPENREG_UTILIZATION_WINDOW_MS 1000
#define OPENREG_PROCESS_NAME_SIZE 32

typedef struct orProcessUsage {
  int pid;
  int device;
  unsigned long long startTime; /* /proc/<pid>/stat field 22: clock ticks after boot */
  char name[OPENREG_PROCESS_NAME_SIZE]; /* /proc/<pid>/comm, NUL-terminated */
  size_t bytesInUse;            /* device memory allocated by the process (page multiples) */
  size_t capacity;              /* the device's capacity in that process */
  unsigned int utilization;     /* percent, 0..100 */
} orProcessUsage;

/* One entry per (live process, device it activated), ordered by device then
 * pid. On input *count is the capacity of `entries` (which may be NULL when
 * it is 0); on return it holds the number of entries there are, of which the
 * first min(input, that number) were written: call again with a larger
 * array when it grew. orErrorNotPermitted when the directory is not private
 * to this user (the message names it, its owner and mode, and a fix that
 * never changes a directory OPENREG_REGISTRY_DIR names). `name` holds the
 * bytes the process chose for itself: not necessarily UTF-8 or printable.
 * Never activates a device. */
OR_API orError_t orGetProcessUsage(orProcessUsage* entries, unsigned int* count);

/* ---- Debugging: chaos scheduling ------------------------------------------ */
/* Chaos scheduling holds and delays stream work at random (FIFO order and
 * event waits are kept), so a missing synchronization gives a wrong result.
 * Decisions are seeded: the same seed holds the same work every run. It is on
 * when OPENREG_DEBUG lists "chaos" (seed: OPENREG_DEBUG_SEED, else random) or
 * after orDebugSetChaos(1, seed); seed 0 means OPENREG_DEBUG_SEED or random.
 * OPENREG_DEBUG_SEED is decimal digits only, 1 to 18446744073709551615 (no
 * sign, spaces or prefix; empty means random); anything else is
 * orErrorInitialization naming the variable, the value and that range. */
OR_API orError_t orDebugSetChaos(int enabled, unsigned long long seed);
OR_API orError_t orDebugGetChaos(int* enabled, unsigned long long* seed);
/* What chaos scheduling did in this process: pieces of work held until waited
 * for, how many of those ran at their cap because nothing the runtime could
 * see waited for them (a host wait on something else, such as another
 * thread's condition), and how many turns in launch order gave up waiting at
 * theirs. Expirations make a run slow and weaken the guarantee: a program
 * that shows them waits for the device in a way the runtime cannot see. Any
 * output may be NULL. */
OR_API orError_t orDebugGetChaosStatistics(unsigned long long* holds,
                                           unsigned long long* expiredHolds,
                                           unsigned long long* expiredTurns);
/* Under chaos scheduling, work enqueued on `stream` after this call runs only
 * once something waits for it (a synchronize, an event wait or query) — the
 * latest it may run — or after a cap of seconds. No effect otherwise. For
 * asynchronous copies into host memory that the host must not read early. */
OR_API orError_t orDebugHoldStream(orStream_t stream);

/* ---- Version ------------------------------------------------------------ */
OR_API orError_t orRuntimeGetVersion(int* version); /* major * 1000 + minor * 10 */

#ifdef __cplusplus
} /* extern "C" */

/* ---- C++ convenience (header-only, built on the C API above) ------------ */
#include <exception>
#include <functional>
#include <memory>
#include <utility>

namespace openreg {

namespace detail {
inline void runHostCallable(void* userData) {
  std::unique_ptr<std::function<void()>> work(static_cast<std::function<void()>*>(userData));
  try {
    (*work)();
  } catch (const std::exception& error) {
    orSetKernelError(error.what());
  } catch (...) {
    orSetKernelError("unknown C++ exception in work enqueued on an OpenReg stream");
  }
}
}  // namespace detail

/* Enqueues a C++ callable on `stream`. An exception it throws is reported
 * like orSetKernelError, with the exception's message. */
inline orError_t launchHostFunc(orStream_t stream, std::function<void()> work) {
  auto* heapWork = new std::function<void()>(std::move(work));
  orError_t status = orLaunchHostFunc(stream, &detail::runHostCallable, heapWork);
  if (status != orSuccess) delete heapWork;
  return status;
}

}  // namespace openreg
#endif /* __cplusplus */

#endif /* OPENREG_H_ */
