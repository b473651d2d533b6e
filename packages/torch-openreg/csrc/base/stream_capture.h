// stream_capture.h — which streams are capturing a graph, what they have
// recorded, and which calls a capture forbids.
//
// A graph capture (integration/graph.h, torch.openreg.graph) turns a stream
// into a recorder, as CUDA's stream capture does: the launch path hands work
// launched on it to the engine's capture code (engine/graph_capture.h), which
// appends it here as a node instead of enqueueing it. Another stream joins the
// capture by waiting for an event recorded on a capturing stream (a fork), and
// the capture's first stream must wait for every joined stream's last work
// before the capture ends (a join). Nodes keep the order they were launched
// in, which is a valid order to run them: a node is launched after everything
// it waits for.
//
// The state lives here, in the lowest layer, because every layer must ask it:
// the launch path (record instead of run), events (capture their record and
// wait), stream, event and device synchronization (forbidden on what is only
// recorded), the block pool (allocations on a capturing stream come from the
// graph's private pool). Nothing here knows what a node runs: CapturedWork is
// the engine's.
//
// Calls that wait for the device are checked as CUDA's capture modes say.
// Waiting for a capturing stream, or for an event recorded in a capture, can
// never work (the work was not run) and always raises. Other waits are
// "potentially unsafe": in mode global they raise on any thread while the
// capture runs, in thread_local only on the capturing thread, in relaxed
// never. An error raised because of a capture invalidates it, as on CUDA:
// capture_end then raises with the first such error.
//
// While no capture is underway every check is one relaxed atomic load.
#pragma once

#include <openreg.h>

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace torch_openreg {

enum class CaptureMode : uint8_t { Global, ThreadLocal, Relaxed };
// "global", "thread_local", "relaxed" (the names of torch.cuda.graph's capture_error_mode).
const char* captureModeName(CaptureMode mode);

// What a captured node runs. The engine defines it (engine/graph_capture.cpp);
// lower layers only hold it.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
};

struct CapturedNode {
  std::string name;  // the operation, as race reports and the profiler name it
  const char* kind;  // "kernel" or "memcpy"
  uint32_t stream;   // index into CapturedGraph::streams
  // Nodes it runs after: the previous node of its stream and the last nodes
  // of the streams it waited for since then.
  std::vector<uint32_t> dependencies;
  std::shared_ptr<const CapturedWork> work;
};

// A finished capture: its nodes in launch order.
struct CapturedGraph {
  c10::DeviceIndex device = 0;
  std::vector<c10::Stream> streams;  // streams[0] is the stream the capture began on
  std::vector<CapturedNode> nodes;
};

// One capture underway. Safe to use from any thread: the autograd engine
// launches a backward's kernels on the capturing stream from its own thread.
class StreamCapture {
 public:
  StreamCapture(uint64_t id, const c10::Stream& origin, orStream_t handle, CaptureMode mode,
                c10::MempoolId_t pool);
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;

  const uint64_t id;
  const c10::Stream origin;
  const CaptureMode mode;
  const std::thread::id thread;  // the thread that began it
  const c10::MempoolId_t pool;   // where allocations on its streams come from

  // Appends a node launched on `stream` (one of the capture's streams). After
  // the capture was invalidated nothing is recorded any more.
  void append(orStream_t stream, std::string name, const char* kind,
              std::shared_ptr<const CapturedWork> work);
  // Marks the capture invalid with the first error raised because of it.
  void invalidate(const std::string& why);
  size_t nodeCount();

  // For the registry (stream_capture.cpp): a stream joins; the point an
  // event recorded on `handle` marks; `handle` waits for such a point; the
  // graph once the capture is over.
  size_t addLane(const c10::Stream& stream, orStream_t handle);
  std::vector<uint64_t> clockOf(orStream_t handle);
  void waitFor(orStream_t handle, const std::vector<uint64_t>& clock);
  CapturedGraph finish();

 private:
  // One stream of the capture. `clock[j]`: how many nodes of lane j this
  // lane's later work is ordered after (a vector clock, so that the join
  // check and the dependencies need no search).
  struct Lane {
    c10::Stream stream;
    orStream_t handle;
    std::vector<uint64_t> clock;
    std::vector<uint32_t> nodes;                // node indices, in order
    std::vector<uint32_t> pendingDependencies;  // joined since its last node
  };
  size_t laneOf(orStream_t handle) const;  // requires mutex_
  std::string unjoinedStreams();           // requires mutex_

  std::mutex mutex_;
  std::vector<Lane> lanes_;
  std::vector<CapturedNode> nodes_;
  std::string invalidation_;
};

namespace detail {
extern std::atomic<int> capturesUnderway;
}

// True while any capture is underway in the process (one relaxed load).
inline bool captureUnderway() noexcept {
  return detail::capturesUnderway.load(std::memory_order_relaxed) != 0;
}

// Makes `stream` capture until endStreamCapture. Raises if it is capturing already.
std::shared_ptr<StreamCapture> beginStreamCapture(const c10::Stream& stream, orStream_t handle,
                                                  CaptureMode mode, c10::MempoolId_t pool);
// Ends the capture: its streams record no more and run work again. Returns
// its graph; raises (after ending it) if it was invalidated, or if a stream
// that joined it was not joined back into the first one.
CapturedGraph endStreamCapture(const std::shared_ptr<StreamCapture>& capture);

// At exit, before the exit path synchronizes the devices: ends every capture
// still underway, discarding what it recorded (no replay can follow), so the
// last synchronization does not conflict with it. Returns the streams those
// captures began on. A graph that owned one finds it invalid.
std::vector<c10::Stream> abandonStreamCaptures();

// The capture `stream` records into (null: it runs its work).
std::shared_ptr<StreamCapture> captureOf(orStream_t stream);
// The pool allocations on `stream` come from while it captures (false: none).
bool capturePoolOf(orStream_t stream, c10::MempoolId_t* pool);
// Whether a stream of `device` is capturing.
bool deviceCapturing(c10::DeviceIndex device);

// ---- Events (integration/event.cpp) ---------------------------------------------
// Recording `event` on a capturing stream marks the capture's point on it (no
// runtime record happens): true. False when `stream` is not capturing.
bool recordEventInCapture(const void* event, const c10::Stream& stream, orStream_t handle);
// Waiting for `event` on `stream`: if the event marks a capture's point, the
// stream joins that capture (or, capturing already, depends on that point):
// true, nothing to enqueue. Raises if a capturing stream would wait for work
// outside its capture, or for another capture's. False: an ordinary wait.
bool waitEventInCapture(const void* event, const c10::Stream& stream, orStream_t handle);
void forgetEvent(const void* event) noexcept;

// ---- What a capture forbids -----------------------------------------------------
// A wait for `stream` (synchronize, query, a blocking copy, .item()).
void checkStreamWait(orStream_t stream, const char* what);
// A wait for `event` (synchronize, query, elapsed time).
void checkEventWait(const void* event, const char* what);
// A wait for every stream of `device` (torch.openreg.synchronize(), the
// allocator releasing its cache).
void checkDeviceWait(c10::DeviceIndex device, const char* what);
// A call CUDA calls potentially unsafe during capture, checked by the modes.
void checkUnsafeCall(const char* what);
// Raises `message` (naming the capture) after invalidating `capture`.
[[noreturn]] void failCapture(const std::shared_ptr<StreamCapture>& capture,
                              const std::string& message);

}  // namespace torch_openreg
