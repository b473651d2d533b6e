// module.cpp — torch_openreg._C: registration entry point and Python helpers.
//
// Importing _C registers the allocators, guard and kernels (static
// initialisers in their files); _init() then registers the hooks and the
// CPU-kernel preferences and validates OPENREG_FALLBACK. The functions below back
// torch.openreg; names mirror torch.cuda's private _C functions.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "base/debug_modes.h"
#include "base/device.h"
#include "base/python_exit.h"
#include "base/runtime_check.h"
#include "base/stream_capture.h"
#include "base/sync_debug.h"
#include "engine/compiled_kernel_launch.h"
#include "engine/fallback.h"
#include "engine/kernel_allocator.h"
#include "engine/kernel_launch.h"
#include "engine/plan.h"
#include "engine/race_detector.h"
#include "integration/autocast.h"
#include "integration/device_allocator.h"
#include "integration/event.h"
#include "integration/generator.h"
#include "integration/hooks.h"
#include "integration/host_allocator.h"
#include "integration/memory_history.h"
#include "integration/profiler.h"
#include "integration/stream.h"
#include "python/graph_bindings.h"
#include "python/ipc_bindings.h"
#include "python/process_group_bindings.h"
#include "python/stream_hold.h"
#include "python/testing_hooks.h"

namespace py = pybind11;

namespace torch_openreg {
namespace {

void initialize() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerHooks();
    preferCpuKernels();
  });
  // These raise with a clear message if a variable is invalid.
  fallbackMode();
  launchBlocking();
  static std::once_flag debugOnce;
  std::call_once(debugOnce, [] {
    readDebugEnvironment();
    installRaceDetector();
  });
}

// Python fixes its exit status before atexit handlers run and offers them no way
// to change it. Functions registered with Py_AtExit run at the very end of
// finalization, after everything Python does at exit (the other atexit handlers,
// flushing its streams): exiting from there with status 1 skips only the
// interpreter freeing its own memory.
void exitWithFailureStatus() {
  static std::once_flag once;
  std::call_once(once, [] { Py_AtExit([] { std::exit(1); }); });
}

// torch.openreg.debug.set_modes: races switched on start from a clean slate
// (what ran while they were off is unknown, so it cannot be checked).
void setDebugModesFromPython(const std::string& list) {
  const unsigned modes = parseDebugModes(list, "torch.openreg.debug.set_modes");
  if ((modes & kDebugRaces) != 0 && !debugModeOn(kDebugRaces)) resetRaceDetector();
  setDebugModes(modes);
}

py::object defaultGeneratorObject(c10::DeviceIndex device) {
  return py::reinterpret_steal<py::object>(
      THPGenerator_initDefaultGenerator(defaultGenerator(device)));
}

void synchronizeDevice(c10::DeviceIndex device) {
  checkDeviceWait(resolveDevice(device), "torch.openreg.synchronize()");
  DeviceScope scope(resolveDevice(device));
  py::gil_scoped_release release;
  OPENREG_CHECK(orDeviceSynchronize());
  notifyStreamOrder(&StreamOrderObserver::deviceSynchronized, resolveDevice(device));
}

// A raw stream handle from Python (0: the device's default stream), checked
// to be a stream of `device`.
orStream_t streamOf(c10::DeviceIndex device, intptr_t handle) {
  if (handle == 0) return nativeHandle(defaultStream(device));
  auto* stream = reinterpret_cast<orStream_t>(handle);
  int streamDevice = -1;
  TORCH_CHECK_VALUE(
      succeeded(orStreamGetDevice(stream, &streamDevice)), "stream handle ", handle,
      " is not an openreg stream: pass a torch.openreg.Stream (or 0 for the default stream)");
  TORCH_CHECK_VALUE(streamDevice == device, "the stream belongs to openreg device ", streamDevice,
                    ", not to device ", static_cast<int>(device), " where the memory is allocated");
  return stream;
}

py::dict statDict(const c10::CachingAllocator::Stat& stat) {
  py::dict result;
  result["current"] = stat.current;
  result["peak"] = stat.peak;
  result["allocated"] = stat.allocated;
  result["freed"] = stat.freed;
  return result;
}

py::dict durationDict(const c10::CachingAllocator::DurationStat& stat) {
  py::dict result;
  result["total"] = stat.total;
  result["max"] = stat.max;
  result["min"] = stat.min;
  result["count"] = stat.count;
  result["avg"] = stat.count == 0 ? 0 : stat.total / stat.count;
  return result;
}

// torch.cuda.host_memory_stats_as_nested_dict's layout.
py::dict hostMemoryStats() {
  const at::HostStats stats = hostAllocator().get_stats();
  py::dict result;
  result["num_host_alloc"] = stats.num_host_alloc;
  result["num_host_free"] = stats.num_host_free;
  result["allocations"] = statDict(stats.allocations);
  result["allocated_bytes"] = statDict(stats.allocated_bytes);
  result["active_requests"] = statDict(stats.active_requests);
  result["active_bytes"] = statDict(stats.active_bytes);
  result["host_alloc_time"] = durationDict(stats.host_alloc_time);
  result["host_free_time"] = durationDict(stats.host_free_time);
  return result;
}

// reserved_bytes_by_private_pools of torch.cuda.memory_stats_as_nested_dict:
// {(0, n): {"all"|"small_pool"|"large_pool": {current, peak, allocated, freed}}}.
py::dict privatePoolStats(c10::DeviceIndex device) {
  const auto stats = deviceAllocator().getDeviceStats(device);
  const char* names[] = {"all", "small_pool", "large_pool"};
  py::dict result;
  for (const auto& [id, array] : stats.reserved_bytes_by_private_pools) {
    py::dict pools;
    for (size_t type = 0; type < array.size(); ++type) pools[names[type]] = statDict(array[type]);
    result[py::make_tuple(id.first, id.second)] = pools;
  }
  return result;
}

void bindMemoryControls(py::module_& m) {
  m.def(
      "_set_memory_fraction",
      [](double fraction, int device) {
        deviceAllocator().setMemoryFraction(static_cast<c10::DeviceIndex>(device), fraction);
      },
      "Limit the caching allocator of `device` to `fraction` of its capacity "
      "(torch.openreg.set_per_process_memory_fraction).");
  m.def(
      "_get_memory_fraction",
      [](int device) {
        return deviceAllocator().memoryFraction(static_cast<c10::DeviceIndex>(device));
      },
      "The memory fraction set for `device` (1.0 when none is set).");
  m.def(
      "_caching_allocator_alloc",
      [](size_t size, int device, intptr_t stream) {
        const c10::DeviceIndex index = checkedDevice(static_cast<c10::DeviceIndex>(device));
        return reinterpret_cast<intptr_t>(
            deviceAllocator().rawAllocate(index, size, streamOf(index, stream)));
      },
      "Allocate `size` bytes from the caching allocator on `device` and `stream`; returns the "
      "address.");
  m.def(
      "_caching_allocator_delete",
      [](intptr_t pointer) { deviceAllocator().rawDelete(reinterpret_cast<void*>(pointer)); },
      "Return an address from _caching_allocator_alloc to the caching allocator.");
  m.def(
      "_stream_handle",
      [](int64_t streamId, int device) {
        const c10::Stream stream(c10::Stream::UNSAFE,
                                 openregDevice(static_cast<c10::DeviceIndex>(device)), streamId);
        return reinterpret_cast<intptr_t>(nativeHandle(stream));
      },
      "The runtime handle of a torch.openreg stream, for the allocator's stream-ordered reuse.");
  m.def(
      "_private_pool_stats",
      [](int device) {
        return privatePoolStats(checkedDevice(static_cast<c10::DeviceIndex>(device)));
      },
      "Statistics of the private memory pools of `device` (MemPool), by pool id.");
  m.def("_host_memory_stats", &hostMemoryStats,
        "Statistics of the pinned host allocator, in torch.cuda.host_memory_stats' keys.");
  m.def(
      "_reset_accumulated_host_memory_stats", [] { hostAllocator().reset_accumulated_stats(); },
      "Reset the pinned host allocator's accumulated counters.");
  m.def(
      "_reset_peak_host_memory_stats", [] { hostAllocator().reset_peak_stats(); },
      "Reset the pinned host allocator's peak values.");
  m.def(
      "_set_sync_debug_mode",
      [](int mode) {
        TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "invalid sync debug mode ", mode,
                          ": expected 0 (\"default\"), 1 (\"warn\") or 2 (\"error\")");
        setSyncDebugMode(static_cast<SyncDebugMode>(mode));
      },
      "Set the sync debug mode: 0 off, 1 warn, 2 error at synchronizing calls.");
  m.def(
      "_get_sync_debug_mode", [] { return static_cast<int>(syncDebugMode()); },
      "The sync debug mode: 0 off, 1 warn, 2 error.");

  py::class_<MemPool>(m, "_MemPool", "A private memory pool of the openreg caching allocator.")
      .def(py::init([](bool useOnOom, bool noSplit) {
             return std::make_unique<MemPool>(PoolOptions{useOnOom, noSplit});
           }),
           py::arg("use_on_oom") = false, py::arg("no_split") = false)
      .def_property_readonly(
          "id",
          [](const MemPool& pool) { return py::make_tuple(pool.id().first, pool.id().second); },
          "The pool's id, (0, n).")
      .def_property_readonly(
          "device", [](const MemPool& pool) { return static_cast<int>(pool.device()); },
          "The openreg device that was current when the pool was created.")
      .def("use_count", &MemPool::useCount,
           "MemPool objects and use_mem_pool scopes using the pool.")
      .def("_begin_allocate",
           [](const MemPool& pool, int device) {
             pool.beginAllocating(static_cast<c10::DeviceIndex>(device));
           })
      .def("_end_allocate", [](const MemPool& pool, int device) {
        pool.endAllocating(static_cast<c10::DeviceIndex>(device));
      });
}

}  // namespace
}  // namespace torch_openreg

PYBIND11_MODULE(_C, m) {
  using namespace torch_openreg;
  m.doc() = "Native part of torch_openreg (use torch.openreg instead).";
  bindProcessGroup(m);
  bindGraphs(m);
  bindIpc(m);
  bindStreamHold(m);
  bindTestingHooks(m);
  m.def("_init", &initialize, "Initialise the device runtime; raises if it cannot be used.");
  m.def("_close_for_python_exit", &closeForPythonExit,
        "From the exit handler: background threads stop letting go of Python objects and "
        "running callbacks (see base/python_exit.h); returns once none is doing so.");
  // Wrapped so that the warning for an invalid environment is a Python warning.
  m.def("_device_count",
        torch::wrap_pybind_function([] { return static_cast<int>(deviceCount()); }),
        "Number of openreg devices (0, with one warning, if the environment is invalid).");
  m.def(
      "_get_device", [] { return static_cast<int>(currentDevice()); },
      "Index of this thread's current openreg device.");
  m.def(
      "_set_device", [](int device) { setCurrentDevice(static_cast<c10::DeviceIndex>(device)); },
      "Make `device` this thread's current openreg device.");
  m.def(
      "_exchange_device",
      [](int device) {
        return static_cast<int>(exchangeDevice(static_cast<c10::DeviceIndex>(device)));
      },
      "Make `device` current and return the previous current device.");
  m.def(
      "_synchronize", [](int device) { synchronizeDevice(static_cast<c10::DeviceIndex>(device)); },
      "Wait for all work queued on every stream of `device`.");
  // Every slot, not deviceCount(): the exit handler asks, and a program that never
  // asked for the devices must not be warned about them at exit.
  m.def(
      "_is_initialized",
      [] {
        for (c10::DeviceIndex d = 0; d < OPENREG_MAX_DEVICES; ++d) {
          if (deviceUsed(d)) return true;
        }
        return false;
      },
      "Whether any openreg device has been used in this process.");
  m.def(
      "_get_default_generator",
      [](int device) { return defaultGeneratorObject(static_cast<c10::DeviceIndex>(device)); },
      "The default torch.Generator of `device`.");
  m.def(
      "_mem_get_info",
      [](int device) {
        return deviceAllocator().getMemoryInfo(static_cast<c10::DeviceIndex>(device));
      },
      "(free, total) bytes of `device` as the runtime sees them.");
  m.def("_fallback_mode", &fallbackModeName,
        "How operators without a native kernel run: 'inplace' (default) or 'copy' "
        "(OPENREG_FALLBACK).");
  m.def(
      "_stream_priority",
      [](int64_t streamId, int device) {
        return streamPriority(c10::Stream(
            c10::Stream::UNSAFE, openregDevice(static_cast<c10::DeviceIndex>(device)), streamId));
      },
      "Priority of the stream with id `stream_id` on `device`.");
  // A deliberately slow kernel for tests and demonstrations (like
  // torch.cuda._sleep): occupies the current stream of `device`.
  m.def(
      "_sleep",
      [](int device, int64_t microseconds) {
        TORCH_CHECK(microseconds >= 0, "_sleep: the duration must not be negative");
        const auto index =
            static_cast<c10::DeviceIndex>(resolveDevice(static_cast<c10::DeviceIndex>(device)));
        launchOnDevice(LaunchSpec{LaunchContext::forDevice(index), "openreg::_sleep"},
                       [microseconds] {
                         std::this_thread::sleep_for(std::chrono::microseconds(microseconds));
                       });
      },
      "Enqueue a kernel that only waits `microseconds` on the current stream of `device` (-1: "
      "current device).");
  m.def(
      "_event_elapsed_time",
      [](int64_t start, int64_t end) {
        return elapsedMilliseconds(reinterpret_cast<void*>(start), reinterpret_cast<void*>(end));
      },
      "Milliseconds between two recorded events, given by their runtime handles.");
  m.def(
      "_stream_priority_range",
      [] {
        const PriorityRange range = priorityRange();
        return std::make_pair(range.least, range.greatest);
      },
      "(least, greatest) stream priority, as the runtime reports them.");
  m.def(
      "_output_placement_counts",
      [] {
        const OutputPlacementCounts counts = outputPlacementCounts();
        return std::make_pair(counts.inPlace, counts.copied);
      },
      "(in place, copied): how many kernel results were computed into preallocated outputs and how "
      "many were copied.");
  m.def("_kernel_allocator_installed", &kernelAllocatorInstalled,
        "Whether the allocator for kernel-private allocations is installed (it is at the first "
        "device kernel).");
  m.def(
      "_plan_cache_info",
      [] {
        const PlanCacheInfo info = planCacheInfo();
        py::dict result;
        result["size"] = info.size;
        result["capacity"] = info.capacity;
        result["hits"] = info.hits;
        result["misses"] = info.misses;
        result["evictions"] = info.evictions;
        return result;
      },
      "The operator plan cache: size, capacity, hits, misses, evictions.");
  m.def(
      "_set_plan_cache_capacity",
      [](size_t capacity) {
        TORCH_CHECK(capacity > 0, "the plan cache capacity must be at least 1");
        setPlanCacheCapacity(capacity);
      },
      "Set how many operator plans the cache keeps (least recently used dropped first).");
  // Tells torch's Python layer that openreg is initialised (it is, from the
  // moment torch_openreg registered it); torch gates some device-generic calls
  // on this flag, e.g. torch.accelerator.empty_host_cache().
  m.def(
      "_mark_initialized", [] { torch::utils::device_lazy_init(at::kPrivateUse1); },
      "Tell torch's lazy-initialisation machinery that openreg is initialised.");
  registerCompiledKernelBindings(m);
  m.def(
      "_autocast_policy", [] { return autocastPolicy(); },
      "The autocast policy registered for openreg, as (operator, category) pairs.");
  bindMemoryControls(m);
  m.def(
      "_debug_modes", [] { return debugModeNames(debugModes()); },
      "The debug modes on (OPENREG_DEBUG): a list of 'races', 'poison', 'chaos'.");
  m.def("_set_debug_modes", &setDebugModesFromPython, py::arg("modes"),
        "Switch debug modes: a comma-separated list of 'races', 'poison', 'chaos' ('' for none).");
  m.def("_poison_value", &typedPoisonValue, py::arg("dtype"),
        "What a poisoned element of `dtype` holds where the dtype is known (the openreg "
        "factories), or None where it is the 0xFF bytes of every poisoned allocation.");
  m.def("_race_errors_raise", &raceErrorsRaise,
        "Whether a detected stream race raises (True) or warns (False).");
  m.def("_set_race_errors_raise", &setRaceErrorsRaise,
        "Choose whether a detected stream race raises (True) or warns (False).");
  m.def("_race_reports", &raceReports, "The stream-race reports made so far, as text.");
  m.def(
      "_race_statistics",
      [] {
        const RaceStatistics statistics = raceStatistics();
        return std::make_pair(statistics.reports, statistics.checkedLaunches);
      },
      "(reports, checked launches) of the race detector.");
  m.def("_clear_race_reports", &clearRaceReports, "Forget the stream-race reports made so far.");
  m.def("_reset_race_detector", &resetRaceDetector,
        "Forget every tracked access and stream clock of the race detector.");
  m.def(
      "_chaos_state",
      [] {
        int enabled = 0;
        unsigned long long seed = 0;
        OPENREG_CHECK(orDebugGetChaos(&enabled, &seed));
        return std::make_pair(enabled != 0, static_cast<uint64_t>(seed));
      },
      "(enabled, seed) of chaos scheduling.");
  m.def(
      "_chaos_statistics",
      [] {
        unsigned long long holds = 0, expiredHolds = 0, expiredTurns = 0;
        OPENREG_CHECK(orDebugGetChaosStatistics(&holds, &expiredHolds, &expiredTurns));
        return std::make_tuple(static_cast<uint64_t>(holds), static_cast<uint64_t>(expiredHolds),
                               static_cast<uint64_t>(expiredTurns));
      },
      "(holds, expired holds, expired turns) of chaos scheduling in this process.");
  m.def(
      "_set_chaos",
      [](bool enabled, uint64_t seed) {
        OPENREG_CHECK(orDebugSetChaos(enabled ? 1 : 0, seed));
        setDebugModes(enabled ? debugModes() | kDebugChaos : debugModes() & ~kDebugChaos);
      },
      py::arg("enabled"), py::arg("seed") = 0,
      "Switch chaos scheduling on or off, with `seed` for a replayable schedule.");
  // In a child forked after a device was used (torch.openreg._fork): torch's
  // lazy initialisation calls torch.openreg._lazy_init() again, which raises.
  m.def(
      "_require_lazy_init_after_fork",
      [] {
        torch::utils::set_device_in_bad_fork(at::kPrivateUse1, true);
        torch::utils::set_requires_device_init(at::kPrivateUse1, true);
      },
      "Mark this forked child as unable to use openreg (torch.openreg.init raises).");
  // Validated by torch.openreg.memory._record_memory_history.
  m.def(
      "_record_memory_history",
      [](bool enabled, bool keepTrace, const std::string& context, bool cppFrames,
         size_t maxEntries, bool clearHistory) {
        recordMemoryHistory({enabled, keepTrace, context, cppFrames, maxEntries, clearHistory});
      },
      "Start, change or stop recording the allocator's history "
      "(torch.openreg.memory._record_memory_history).");
  m.def("_memory_snapshot", &memorySnapshot,
        "The allocator's segments, blocks and recorded history in torch.cuda's snapshot format.");
  m.def("_profiler_registered", &profilerRegistered,
        "Whether openreg's Kineto and legacy profiler hooks are registered.");
  m.def("_check_runtime", &checkDeviceEnvironment,
        "Raise if the environment the devices are made from is invalid (torch.openreg.init, and "
        "import with OPENREG_AUTOLOAD_STRICT=1); activates no device.");
  m.def("_exit_with_failure_status", &exitWithFailureStatus,
        "From the exit handler, after reporting an error nobody was told of: the process exits "
        "with status 1, as after an unhandled exception.");
}
