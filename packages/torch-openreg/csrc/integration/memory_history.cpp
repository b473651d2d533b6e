// memory_history.cpp — the pool observer: profiler memory events, the
// per-device ring buffers of actions, live allocation stacks, snapshots.
#include "integration/memory_history.h"

#include <c10/core/Allocator.h>
#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/device.h"
#include "base/kernel_thread.h"
#include "base/runtime_check.h"
#include "memory/block_pool.h"

namespace py = pybind11;

// From torch/csrc/profiler/python/combined_traceback.h (exported by
// libtorch_python), which cannot be included from torch's wheel: it includes
// nlohmann/json.hpp, which the wheel does not ship.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace torch_openreg {
namespace {

using Context = std::shared_ptr<c10::GatheredContext>;

struct Entry {
  PoolAction action;
  void* address;
  size_t size;
  orStream_t stream;
  int64_t timeUs;
  size_t deviceFree;  // OutOfMemory only
  Context frames;
};

// One device's actions, oldest first once unrolled.
struct Ring {
  std::vector<Entry> entries;
  size_t next = 0;  // where the next entry goes once full

  void add(Entry entry, size_t capacity) {
    if (entries.size() < capacity) {
      entries.push_back(std::move(entry));
      return;
    }
    entries[next] = std::move(entry);
    next = (next + 1) % capacity;
  }
  std::vector<const Entry*> inOrder() const {
    std::vector<const Entry*> ordered;
    for (size_t i = 0; i < entries.size(); ++i)
      ordered.push_back(&entries[(next + i) % entries.size()]);
    return ordered;
  }
};

struct History {
  std::mutex mutex;
  MemoryHistorySettings settings;
  std::vector<Ring> rings = std::vector<Ring>(OPENREG_MAX_DEVICES);
  std::unordered_map<void*, Context> liveFrames;
};

History& history() {
  static auto* instance = new History();  // never destroyed: frees may come during exit
  return *instance;
}

// Read without the lock on every allocation: what to capture.
std::atomic<bool> recording{false};
std::atomic<bool> framesForAllocations{false};
std::atomic<bool> framesForFrees{false};
std::atomic<bool> cppFrames{false};

int64_t nowMicroseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Context gatherFrames(bool allocating) {
  if (!recording.load(std::memory_order_relaxed) || insideKernel()) return nullptr;
  const bool wanted = allocating ? framesForAllocations.load(std::memory_order_relaxed)
                                 : framesForFrees.load(std::memory_order_relaxed);
  if (!wanted) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                          cppFrames.load(std::memory_order_relaxed));
}

// As CUDA reports it: a tensor's bytes count until its free is requested.
void reportToProfiler(const PoolEvent& event) {
  if (event.action != PoolAction::Alloc && event.action != PoolAction::FreeRequested) return;
  if (!c10::memoryProfilingEnabled()) return;
  const auto bytes = static_cast<int64_t>(event.size);
  c10::reportMemoryUsageToProfiler(
      event.address, event.action == PoolAction::Alloc ? bytes : -bytes, event.allocatedBytes,
      event.reservedBytes, c10::Device(c10::DeviceType::PrivateUse1, event.device));
}

size_t deviceFreeBytes(c10::DeviceIndex device) {
  size_t free = 0, total = 0;
  DeviceScope scope(device);
  succeeded(orMemGetInfo(&free, &total));
  return free;
}

void recordEntry(const PoolEvent& event, const Context& frames) {
  History& state = history();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.settings.enabled) return;
  if (event.action == PoolAction::Alloc && frames != nullptr)
    state.liveFrames[event.address] = frames;
  if (event.action == PoolAction::Free) state.liveFrames.erase(event.address);
  if (!state.settings.keepTrace || state.settings.maxEntries == 0) return;
  const size_t deviceFree =
      event.action == PoolAction::OutOfMemory ? deviceFreeBytes(event.device) : 0;
  // context="state" keeps stacks for live allocations only, not in the trace.
  const bool framesInTrace = state.settings.context == "alloc" || state.settings.context == "all";
  state.rings[event.device].add(
      Entry{event.action, event.address, event.size, event.stream, nowMicroseconds(), deviceFree,
            framesInTrace ? frames : nullptr},
      state.settings.maxEntries);
}

void observe(const PoolEvent& event, const Context& frames) {
  reportToProfiler(event);
  if (recording.load(std::memory_order_relaxed)) recordEntry(event, frames);
}

const PoolObserver observer{&gatherFrames, &observe};

const bool installed = [] {
  setPoolObserver(&observer);
  return true;
}();

// ---- Snapshots -------------------------------------------------------------------

// Symbolizes many tracebacks in one call (it shares work between them).
class FrameTable {
 public:
  size_t add(const Context& context) {
    auto* traceback = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (traceback == nullptr) return kNone;
    tracebacks_.push_back(traceback);
    return tracebacks_.size() - 1;
  }
  void symbolize() { symbolized_ = torch::py_symbolize(tracebacks_); }
  py::object frames(size_t index) const {
    return index == kNone ? py::list() : symbolized_.at(index);
  }
  static constexpr size_t kNone = static_cast<size_t>(-1);

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::vector<py::object> symbolized_;
};

int64_t streamNumber(orStream_t stream) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(stream));
}

int64_t addressNumber(const void* address) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(address));
}

struct PendingBlock {
  py::dict block;
  size_t frames;
};

// torch.cuda's block states (a pending free waits for streams recorded with
// record_stream).
const char* blockState(SegmentView::State state) {
  switch (state) {
    case SegmentView::State::Allocated:
      return "active_allocated";
    case SegmentView::State::PendingFree:
      return "active_pending_free";
    case SegmentView::State::Free:
      return "inactive";
  }
  return "inactive";
}

py::list segmentsOf(c10::DeviceIndex device, FrameTable& table, std::vector<PendingBlock>& pending,
                    const std::unordered_map<void*, Context>& liveFrames) {
  py::list segments;
  for (const SegmentView& view : blockPool(device).segments()) {
    size_t allocated = 0, active = 0, requested = 0;
    py::list blocks;
    for (const auto& block : view.blocks) {
      const bool isActive = block.state != SegmentView::State::Free;
      py::dict entry;
      entry["address"] = addressNumber(block.address);
      entry["size"] = block.size;
      entry["requested_size"] = isActive ? block.requested : block.size;
      entry["state"] = blockState(block.state);
      size_t frames = FrameTable::kNone;
      if (block.state == SegmentView::State::Allocated) allocated += block.size;
      if (isActive) {
        active += block.size;
        requested += block.requested;
        auto found = liveFrames.find(block.address);
        if (found != liveFrames.end()) frames = table.add(found->second);
      }
      pending.push_back({entry, frames});
      blocks.append(entry);
    }
    py::dict segment;
    segment["device"] = static_cast<int>(device);
    segment["address"] = addressNumber(view.address);
    segment["total_size"] = view.size;
    segment["stream"] = streamNumber(view.stream);
    segment["segment_type"] = view.small ? "small" : "large";
    segment["segment_pool_id"] = py::make_tuple(0, 0);
    segment["allocated_size"] = allocated;
    segment["active_size"] = active;
    segment["requested_size"] = requested;
    segment["blocks"] = blocks;
    segments.append(segment);
  }
  return segments;
}

const char* actionName(PoolAction action) {
  switch (action) {
    case PoolAction::Alloc:
      return "alloc";
    case PoolAction::FreeRequested:
      return "free_requested";
    case PoolAction::Free:
      return "free_completed";
    case PoolAction::SegmentAlloc:
      return "segment_alloc";
    case PoolAction::SegmentFree:
      return "segment_free";
    case PoolAction::OutOfMemory:
      return "oom";
  }
  return "unknown";
}

py::dict traceEntry(const Entry& entry, const char* action, size_t frames,
                    std::vector<PendingBlock>& pending) {
  py::dict item;
  item["action"] = action;
  if (entry.action != PoolAction::OutOfMemory) item["addr"] = addressNumber(entry.address);
  item["size"] = entry.size;
  item["stream"] = streamNumber(entry.stream);
  item["time_us"] = entry.timeUs;
  if (entry.action == PoolAction::OutOfMemory) item["device_free"] = entry.deviceFree;
  pending.push_back({item, frames});
  return item;
}

py::list traceOf(const Ring& ring, FrameTable& table, std::vector<PendingBlock>& pending) {
  py::list trace;
  for (const Entry* entry : ring.inOrder()) {
    trace.append(traceEntry(*entry, actionName(entry->action), table.add(entry->frames), pending));
  }
  return trace;
}

}  // namespace

void recordMemoryHistory(const MemoryHistorySettings& settings) {
  if (settings.enabled && !settings.context.empty()) torch::installCapturedTracebackPython();
  History& state = history();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!settings.enabled || settings.clearHistory) {
    for (Ring& ring : state.rings) ring = Ring();
  }
  if (!settings.enabled) state.liveFrames.clear();
  state.settings = settings;
  const bool anyFrames = settings.enabled && !settings.context.empty();
  framesForAllocations.store(anyFrames, std::memory_order_relaxed);
  framesForFrees.store(anyFrames && settings.context == "all", std::memory_order_relaxed);
  cppFrames.store(settings.cppFrames, std::memory_order_relaxed);
  recording.store(settings.enabled, std::memory_order_relaxed);
}

py::dict memorySnapshot() {
  FrameTable table;
  std::vector<PendingBlock> pending;
  py::list segments;
  py::list traces;
  std::unordered_map<void*, Context> liveFrames;
  std::vector<Ring> rings;
  {
    History& state = history();
    std::lock_guard<std::mutex> lock(state.mutex);
    liveFrames = state.liveFrames;
    rings = state.rings;
  }
  for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
    if (deviceUsed(device)) {
      for (const auto& segment : segmentsOf(device, table, pending, liveFrames))
        segments.append(segment);
    }
    traces.append(traceOf(rings[device], table, pending));
  }
  table.symbolize();
  for (PendingBlock& item : pending) item.block["frames"] = table.frames(item.frames);
  py::dict snapshot;
  snapshot["segments"] = segments;
  snapshot["device_traces"] = traces;
  return snapshot;
}

}  // namespace torch_openreg
