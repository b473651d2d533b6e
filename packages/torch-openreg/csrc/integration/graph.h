// graph.h — graph capture and replay for PyTorch (at::GraphImplInterface):
// torch.accelerator.Graph and torch.openreg.OpenRegGraph.
//
// A graph's life, as with CUDA graphs: capture_begin turns the current stream
// (never the default one) into a recorder (base/stream_capture.h) whose
// allocations come from the graph's private pool; capture_end returns the
// stream to normal work and keeps what it recorded; instantiate makes it
// replayable (here: nothing to compile, the recorded nodes are run as they
// are); replay runs the nodes again on the current stream, reading and
// writing the same memory; reset forgets the graph and releases its pool.
// The pool's memory stays reserved from capture_begin until reset, so the
// addresses a replay writes are never handed to anyone else meanwhile, and
// graphs that share a pool (pool=other.pool()) reuse each other's memory.
//
// Replaying is engine work (the launch path), which this layer may not call:
// the engine installs it when the extension loads (engine/graph_capture.cpp).
#pragma once

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/Stream.h>

#include <memory>
#include <string>

#include "base/stream_capture.h"

namespace torch_openreg {

using GraphReplay = void (*)(const std::shared_ptr<const CapturedGraph>& graph);
void installGraphReplay(GraphReplay replay);

// A new id for a graph's private pool, (n, 0) as CUDA's graph pools; the
// pools of MemPool objects are (0, n).
c10::MempoolId_t graphPoolHandle();

// torch's capture modes; Default is CUDA's default, global.
CaptureMode captureModeOf(at::GraphCaptureMode mode);

class GraphImpl final : public at::GraphImplInterface {
 public:
  explicit GraphImpl(const at::GraphImplArgs& args = {});
  ~GraphImpl() override;
  GraphImpl(const GraphImpl&) = delete;
  GraphImpl& operator=(const GraphImpl&) = delete;

  void capture_begin(c10::MempoolId_t pool = {0, 0},
                     at::GraphCaptureMode mode = at::GraphCaptureMode::Default) override;
  void capture_end() override;
  void instantiate() override;
  void replay() override;
  void reset() override;
  c10::MempoolId_t pool() const override;
  void enable_debug_mode() override;
  void debug_dump(const std::string& path) override;

  // torch.openreg's extras: whether replay() is ready, and the captured graph
  // (null before capture_end and after reset).
  bool hasGraphExec() const { return exec_ != nullptr; }
  std::shared_ptr<const CapturedGraph> keptGraph() const { return graph_; }

 private:
  // The pool is given up (and, unused, returned to the runtime in stream order).
  void releasePoolMemory() noexcept;

  const bool keepGraph_;
  bool debug_ = false;
  std::shared_ptr<StreamCapture> capture_;     // while capturing
  std::shared_ptr<const CapturedGraph> graph_;  // the captured graph
  std::shared_ptr<const CapturedGraph> exec_;   // what replay() runs, once instantiated
  bool captureEnded_ = false;
  c10::MempoolId_t pool_{0, 0};
  c10::DeviceIndex device_ = -1;
  c10::Stream captureStream_{c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0)};
};

// Registers GraphImpl for torch.accelerator.Graph under the PrivateUse1
// backend's name (call after the backend is renamed; once).
void registerGraphImplementation();

// Whether the current stream of the current device is capturing.
bool currentStreamCapturing();

// The graph in Graphviz DOT: one cluster per stream, an edge per dependency.
std::string graphDot(const CapturedGraph& graph);

}  // namespace torch_openreg
