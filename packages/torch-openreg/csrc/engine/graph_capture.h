// graph_capture.h — launches on a capturing stream become graph nodes, and a
// captured graph replays through the launch path.
//
// Every launch already reaches the launch path (kernel_launch.h) as a
// LaunchSpec and a self-contained body: a std::function holding alias
// descriptors, not tensors, so it does not own device memory and can run
// again. While a stream captures (base/stream_capture.h), the launch path
// hands each launch here first: the body is kept as a node, with what the
// spec says it reads and writes (descriptions that own no memory), and
// nothing is enqueued. A replay enqueues the nodes on the current stream of
// the graph's device in the order they were launched, as one piece of work,
// through the launch path again; with the race detector on, one launch per
// node instead, each with its own LaunchSpec, so the detector checks a replay
// as it checks the operators the graph contains.
//
// What a capture cannot record raises here, naming the capture: a launch the
// caller waits for (.item(), a blocking copy, a data-dependent result), the
// first call of an operator signature (which openreg runs synchronously to
// confirm its plan: warm up before capturing, as CUDA graphs require), work
// that hands off to other threads (collectives), a copy between devices.
#pragma once

#include <openreg.h>

#include <c10/core/Stream.h>

#include <functional>
#include <memory>

#include "base/stream_capture.h"
#include "engine/launch_spec.h"

namespace torch_openreg {

// The launch path's interception points. Each is one relaxed load while no
// capture is underway; true when the launch was recorded instead (`body` /
// `afterCopy` moved into the graph).
bool captureLaunch(const LaunchSpec& spec, std::function<void()>& body);
bool captureCopy(const LaunchSpec& spec, void* destination, const void* source, size_t bytes,
                 orMemcpyKind kind, std::function<void()>& afterCopy);
inline bool capturedInstead(const LaunchSpec& spec, std::function<void()>& body) {
  return captureUnderway() && captureLaunch(spec, body);
}
inline bool capturedCopyInstead(const LaunchSpec& spec, void* destination, const void* source,
                                size_t bytes, orMemcpyKind kind, std::function<void()>& afterCopy) {
  return captureUnderway() && captureCopy(spec, destination, source, bytes, kind, afterCopy);
}

// A launch the caller waits for (runOnDevice): raises if a capture forbids it.
void refuseSynchronousLaunch(const LaunchSpec& spec);
inline void checkSynchronousLaunch(const LaunchSpec& spec) {
  if (captureUnderway()) refuseSynchronousLaunch(spec);
}

// Ordering two devices' streams (a copy between devices): raises if either captures.
void checkCrossDeviceOrdering(const c10::Stream& waiter, const c10::Stream& producer);

// Enqueues `graph` on the current stream of its device (installed as the
// replay of integration/graph.h).
void replayGraph(const std::shared_ptr<const CapturedGraph>& graph);

}  // namespace torch_openreg
