// stream_capture.cpp — the registry of captures, their streams and events,
// and the messages of what a capture forbids.
//
// One registry mutex guards which stream and which event belongs to which
// capture; each capture's own mutex guards its lanes and nodes. The registry
// mutex is always taken first, and neither calls out while holding them (the
// block pool asks capturePoolOf under its own lock).
#include "base/stream_capture.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace torch_openreg {
namespace detail {
std::atomic<int> capturesUnderway{0};
}  // namespace detail

namespace {

std::string describe(const c10::Stream& stream) {
  std::ostringstream text;
  text << (stream.id() == 0 ? "the default stream" : "stream " + std::to_string(stream.id()))
       << " of openreg:" << static_cast<int>(stream.device_index());
  return text.str();
}

const char* kInvalidated = " This capture is now invalid: capture_end() will raise.";

std::string conflictMessage(const StreamCapture& capture, const char* what) {
  return std::string("openreg: ") + what + " is not permitted while " + describe(capture.origin) +
         " is capturing a graph (operation not permitted when stream is capturing): captured work "
         "is only recorded, not run, so there is nothing to wait for. Make the call before "
         "capture_begin or after capture_end; a replay reads and writes the same tensors as the "
         "capture, so read results after replay().";
}

std::string unsafeMessage(const StreamCapture& capture, const char* what) {
  const bool global = capture.mode == CaptureMode::Global;
  const bool here = capture.thread == std::this_thread::get_id();
  return std::string("openreg: ") + what +
         " is not permitted while a graph is being captured with capture_error_mode=\"" +
         captureModeName(capture.mode) + "\" (on " + describe(capture.origin) + ", begun by " +
         (here ? "this thread" : "another thread") + "): in this mode " +
         (global ? "no thread may wait for the device while the capture runs"
                 : "the capturing thread may not wait for the device") +
         ". Make the call before capture_begin or after capture_end, or capture with "
         "capture_error_mode=\"" +
         (global ? "thread_local\" (only the capturing thread is checked) or \"relaxed\""
                 : "relaxed\"") +
         " if the call must happen during the capture and waits for nothing captured.";
}

}  // namespace

const char* captureModeName(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::Global:
      return "global";
    case CaptureMode::ThreadLocal:
      return "thread_local";
    case CaptureMode::Relaxed:
      return "relaxed";
  }
  return "?";
}

// ---- One capture ------------------------------------------------------------------

StreamCapture::StreamCapture(uint64_t id, const c10::Stream& origin, orStream_t handle,
                             CaptureMode mode, c10::MempoolId_t pool)
    : id(id), origin(origin), mode(mode), thread(std::this_thread::get_id()), pool(pool) {
  lanes_.push_back(Lane{origin, handle, {0}, {}, {}});
}

size_t StreamCapture::laneOf(orStream_t handle) const {
  size_t index = 0;
  while (index < lanes_.size() && lanes_[index].handle != handle) ++index;
  TORCH_INTERNAL_ASSERT(index < lanes_.size(), "openreg: a stream is not part of its capture");
  return index;
}

size_t StreamCapture::addLane(const c10::Stream& stream, orStream_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  lanes_.push_back(Lane{stream, handle, std::vector<uint64_t>(lanes_.size() + 1, 0), {}, {}});
  return lanes_.size() - 1;
}

void StreamCapture::append(orStream_t stream, std::string name, const char* kind,
                           std::shared_ptr<const CapturedWork> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!invalidation_.empty()) return;
  const size_t index = laneOf(stream);
  Lane& lane = lanes_[index];
  CapturedNode node{std::move(name), kind, static_cast<uint32_t>(index), {}, std::move(work)};
  if (!lane.nodes.empty()) node.dependencies.push_back(lane.nodes.back());
  for (uint32_t joined : lane.pendingDependencies) node.dependencies.push_back(joined);
  lane.pendingDependencies.clear();
  const auto nodeIndex = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back(std::move(node));
  lane.nodes.push_back(nodeIndex);
  if (lane.clock.size() <= index) lane.clock.resize(index + 1, 0);
  lane.clock[index] = lane.nodes.size();
}

std::vector<uint64_t> StreamCapture::clockOf(orStream_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  return lanes_[laneOf(handle)].clock;
}

void StreamCapture::waitFor(orStream_t handle, const std::vector<uint64_t>& clock) {
  std::lock_guard<std::mutex> lock(mutex_);
  Lane& lane = lanes_[laneOf(handle)];
  if (lane.clock.size() < clock.size()) lane.clock.resize(clock.size(), 0);
  for (size_t other = 0; other < clock.size(); ++other) {
    if (clock[other] <= lane.clock[other]) continue;
    lane.clock[other] = clock[other];
    lane.pendingDependencies.push_back(lanes_[other].nodes[clock[other] - 1]);
  }
}

void StreamCapture::invalidate(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (invalidation_.empty()) invalidation_ = why;
}

size_t StreamCapture::nodeCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return nodes_.size();
}

std::string StreamCapture::unjoinedStreams() {
  const Lane& first = lanes_.front();
  std::string unjoined;
  for (size_t other = 1; other < lanes_.size(); ++other) {
    const uint64_t known = other < first.clock.size() ? first.clock[other] : 0;
    if (known >= lanes_[other].nodes.size()) continue;
    unjoined += (unjoined.empty() ? "" : ", ") + describe(lanes_[other].stream);
  }
  return unjoined;
}

CapturedGraph StreamCapture::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(invalidation_.empty(),
              "openreg: capture_end: the capture was invalidated by an error raised during it, "
              "so it recorded an incomplete graph; capture again after fixing that error. The "
              "first error was: ",
              invalidation_);
  const std::string unjoined = unjoinedStreams();
  TORCH_CHECK(unjoined.empty(), "openreg: capture_end: ", unjoined,
              " joined the capture (by waiting for work of a capturing stream) but its last work "
              "was not joined back into ",
              describe(origin),
              ", where the capture began: make that stream wait for it before "
              "capture_end (capture_stream.wait_stream(side_stream)), as CUDA graphs require");
  CapturedGraph graph;
  graph.device = origin.device_index();
  for (const Lane& lane : lanes_) graph.streams.push_back(lane.stream);
  graph.nodes = std::move(nodes_);
  return graph;
}

// ---- The registry ------------------------------------------------------------------

struct CaptureRegistry {
  struct EventMark {
    std::shared_ptr<StreamCapture> capture;
    std::vector<uint64_t> clock;  // the recording lane's clock at the record
  };

  std::mutex mutex;
  std::vector<std::shared_ptr<StreamCapture>> captures;
  std::unordered_map<orStream_t, std::shared_ptr<StreamCapture>> streams;
  std::unordered_map<const void*, EventMark> events;
  uint64_t nextId = 0;

  static CaptureRegistry& get() {
    static auto* registry = new CaptureRegistry();  // never destroyed: workers may ask at exit
    return *registry;
  }

  void publishCount() {
    detail::capturesUnderway.store(static_cast<int>(captures.size()), std::memory_order_relaxed);
  }

  std::shared_ptr<StreamCapture> find(orStream_t stream) {
    auto found = streams.find(stream);
    return found == streams.end() ? nullptr : found->second;
  }

  // Joins `stream` to the capture of `mark`, or records its dependency on it.
  // An error message, or empty when the wait was captured.
  std::string joinOrDepend(const EventMark& mark, const c10::Stream& stream, orStream_t handle) {
    std::shared_ptr<StreamCapture> current = find(handle);
    if (current == nullptr) {
      if (stream.device_index() != mark.capture->origin.device_index()) {
        return "openreg: " + describe(stream) + " cannot join the graph captured on " +
               describe(mark.capture->origin) +
               ": an openreg graph records the work of one device. Capture each device's work "
               "in a graph of its own.";
      }
      mark.capture->addLane(stream, handle);
      streams.emplace(handle, mark.capture);
    } else if (current != mark.capture) {
      return "openreg: " + describe(stream) +
             " is capturing one graph and cannot wait for an event recorded in another capture "
             "(two captures cannot be merged).";
    }
    mark.capture->waitFor(handle, mark.clock);
    return "";
  }

  // The capture that forbids a potentially unsafe call on this thread, if any.
  std::shared_ptr<StreamCapture> forbidding() {
    const std::thread::id self = std::this_thread::get_id();
    for (const auto& capture : captures) {
      if (capture->mode == CaptureMode::Global) return capture;
      if (capture->mode == CaptureMode::ThreadLocal && capture->thread == self) return capture;
    }
    return nullptr;
  }
};

std::shared_ptr<StreamCapture> beginStreamCapture(const c10::Stream& stream, orStream_t handle,
                                                  CaptureMode mode, c10::MempoolId_t pool) {
  CaptureRegistry& registry = CaptureRegistry::get();
  std::lock_guard<std::mutex> lock(registry.mutex);
  TORCH_CHECK(registry.find(handle) == nullptr, "openreg: ", describe(stream),
              " is already capturing a graph: end that capture (capture_end) before beginning "
              "another one on it");
  auto capture = std::make_shared<StreamCapture>(++registry.nextId, stream, handle, mode, pool);
  registry.captures.push_back(capture);
  registry.streams.emplace(handle, capture);
  registry.publishCount();
  return capture;
}

CapturedGraph endStreamCapture(const std::shared_ptr<StreamCapture>& capture) {
  CaptureRegistry& registry = CaptureRegistry::get();
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto& captures = registry.captures;
    captures.erase(std::remove(captures.begin(), captures.end(), capture), captures.end());
    for (auto it = registry.streams.begin(); it != registry.streams.end();) {
      it = it->second == capture ? registry.streams.erase(it) : std::next(it);
    }
    for (auto it = registry.events.begin(); it != registry.events.end();) {
      it = it->second.capture == capture ? registry.events.erase(it) : std::next(it);
    }
    registry.publishCount();
  }
  return capture->finish();
}

std::vector<c10::Stream> abandonStreamCaptures() {
  CaptureRegistry& registry = CaptureRegistry::get();
  std::vector<std::shared_ptr<StreamCapture>> captures;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    captures.swap(registry.captures);
    registry.streams.clear();
    registry.events.clear();
    registry.publishCount();
  }
  std::vector<c10::Stream> origins;
  for (const std::shared_ptr<StreamCapture>& capture : captures) {
    capture->invalidate("openreg: the program exited while the capture was underway");
    origins.push_back(capture->origin);
  }
  return origins;
}

std::shared_ptr<StreamCapture> captureOf(orStream_t stream) {
  if (!captureUnderway()) return nullptr;
  CaptureRegistry& registry = CaptureRegistry::get();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.find(stream);
}

bool capturePoolOf(orStream_t stream, c10::MempoolId_t* pool) {
  std::shared_ptr<StreamCapture> capture = captureOf(stream);
  if (capture == nullptr) return false;
  *pool = capture->pool;
  return true;
}

bool deviceCapturing(c10::DeviceIndex device) {
  if (!captureUnderway()) return false;
  CaptureRegistry& registry = CaptureRegistry::get();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return std::any_of(registry.captures.begin(), registry.captures.end(),
                     [device](const auto& c) { return c->origin.device_index() == device; });
}

bool recordEventInCapture(const void* event, const c10::Stream& /*stream*/, orStream_t handle) {
  if (!captureUnderway()) return false;
  CaptureRegistry& registry = CaptureRegistry::get();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::shared_ptr<StreamCapture> capture = registry.find(handle);
  if (capture == nullptr) return false;
  registry.events[event] = CaptureRegistry::EventMark{capture, capture->clockOf(handle)};
  return true;
}

bool waitEventInCapture(const void* event, const c10::Stream& stream, orStream_t handle) {
  if (!captureUnderway()) return false;
  CaptureRegistry& registry = CaptureRegistry::get();
  std::shared_ptr<StreamCapture> failed;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto mark = registry.events.find(event);
    if (mark != registry.events.end()) {
      error = registry.joinOrDepend(mark->second, stream, handle);
      if (error.empty()) return true;
      failed = registry.find(handle);
      if (failed == nullptr) failed = mark->second.capture;
    } else {
      failed = registry.find(handle);
      if (failed == nullptr) return false;
      error = "openreg: " + describe(stream) +
              ", capturing a graph, cannot wait for an event recorded outside the capture (before "
              "capture_begin, or on a stream that is not capturing): a graph can only depend on "
              "work it captured. Make the stream wait before capture_begin (for example "
              "capture_stream.wait_stream(torch.openreg.current_stream()) before the capture), "
              "as CUDA graphs require.";
    }
  }
  failCapture(failed, error);
}

void forgetEvent(const void* event) noexcept {
  if (!captureUnderway()) return;
  CaptureRegistry& registry = CaptureRegistry::get();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.events.erase(event);
}

// ---- What a capture forbids ----------------------------------------------------------

void failCapture(const std::shared_ptr<StreamCapture>& capture, const std::string& message) {
  capture->invalidate(message);
  TORCH_CHECK(false, message, kInvalidated);
}

void checkUnsafeCall(const char* what) {
  if (!captureUnderway()) return;
  std::shared_ptr<StreamCapture> capture;
  {
    CaptureRegistry& registry = CaptureRegistry::get();
    std::lock_guard<std::mutex> lock(registry.mutex);
    capture = registry.forbidding();
  }
  if (capture != nullptr) failCapture(capture, unsafeMessage(*capture, what));
}

void checkStreamWait(orStream_t stream, const char* what) {
  if (!captureUnderway()) return;
  if (std::shared_ptr<StreamCapture> capture = captureOf(stream)) {
    failCapture(capture, conflictMessage(*capture, what));
  }
  checkUnsafeCall(what);
}

void checkEventWait(const void* event, const char* what) {
  if (!captureUnderway()) return;
  std::shared_ptr<StreamCapture> capture;
  {
    CaptureRegistry& registry = CaptureRegistry::get();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto mark = registry.events.find(event);
    if (mark != registry.events.end()) capture = mark->second.capture;
  }
  if (capture != nullptr) {
    failCapture(
        capture,
        conflictMessage(*capture,
                        (std::string(what) + " of an event recorded during the capture").c_str()));
  }
  checkUnsafeCall(what);
}

void checkDeviceWait(c10::DeviceIndex device, const char* what) {
  if (!captureUnderway()) return;
  std::shared_ptr<StreamCapture> capture;
  {
    CaptureRegistry& registry = CaptureRegistry::get();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (const auto& candidate : registry.captures) {
      if (candidate->origin.device_index() == device) capture = candidate;
    }
  }
  if (capture != nullptr) failCapture(capture, conflictMessage(*capture, what));
  checkUnsafeCall(what);
}

}  // namespace torch_openreg
