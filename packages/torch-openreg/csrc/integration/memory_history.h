// memory_history.h — torch.cuda's memory history and snapshots, for openreg.
//
// The block pools report what they do to one observer (memory/block_pool.h).
// This file is that observer: it forwards allocations and frees to PyTorch's
// profiler (profile_memory=True) and, while history recording is on, keeps a
// ring buffer of actions per device and the stack of every live allocation.
// Snapshots come out in the layout torch.cuda.memory._snapshot() uses, so
// PyTorch's memory visualizer (torch.cuda._memory_viz, pytorch.org/memory_viz)
// reads them unchanged.
//
// Stacks are CapturedTracebacks, as in CUDA's allocator: capture stores code
// pointers only (Python frames, optionally C++ return addresses), and
// symbolizing happens when a snapshot is taken. They are captured before
// the pool takes its lock (capturing Python frames takes the GIL) and never
// on stream workers (a kernel's temporaries have no Python caller).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>

namespace torch_openreg {

struct MemoryHistorySettings {
  bool enabled = false;      // false: stop recording (and forget live stacks)
  bool keepTrace = false;    // enabled == "all": a history of actions, not just live state
  std::string context;       // "", "state", "alloc" or "all", as torch.cuda's `context`
  bool cppFrames = false;    // stacks == "all"
  size_t maxEntries = 0;     // per device; older entries are overwritten
  bool clearHistory = false;
};

void recordMemoryHistory(const MemoryHistorySettings& settings);

// {"segments": [...], "device_traces": [[...] per device]} as torch.cuda's.
// Needs the GIL (it builds Python objects).
pybind11::dict memorySnapshot();

}  // namespace torch_openreg
