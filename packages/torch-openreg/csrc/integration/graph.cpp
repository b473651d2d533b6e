// graph.cpp — GraphImpl's life cycle, its registration with torch, DOT dumps.
#include "integration/graph.h"

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "base/device.h"
#include "integration/stream.h"
#include "memory/block_pool.h"

namespace torch_openreg {
namespace {

std::atomic<GraphReplay> installedReplay{nullptr};
std::atomic<c10::CaptureId_t> nextGraphPool{0};

std::string describe(const c10::Stream& stream) {
  return (stream.id() == 0 ? std::string("the default stream")
                           : "stream " + std::to_string(stream.id())) +
         " of openreg:" + std::to_string(stream.device_index());
}

}  // namespace

void installGraphReplay(GraphReplay replay) { installedReplay.store(replay); }

c10::MempoolId_t graphPoolHandle() { return {++nextGraphPool, 0}; }

CaptureMode captureModeOf(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::ThreadLocal:
      return CaptureMode::ThreadLocal;
    case at::GraphCaptureMode::Relaxed:
      return CaptureMode::Relaxed;
    case at::GraphCaptureMode::Default:
    case at::GraphCaptureMode::Global:
      break;
  }
  return CaptureMode::Global;
}

GraphImpl::GraphImpl(const at::GraphImplArgs& args) : keepGraph_(args.keep_graph) {}

GraphImpl::~GraphImpl() {
  try {
    reset();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

void GraphImpl::capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) {
  TORCH_CHECK(capture_ == nullptr,
              "This openreg graph is capturing already: call capture_end() before capture_begin()");
  TORCH_CHECK(!captureEnded_,
              "This openreg graph already owns a captured graph. To capture a new graph, create a "
              "new instance, or call reset() first.");
  TORCH_CHECK(pool.first == 0 || pool.second == 0, "invalid graph memory pool id (", pool.first,
              ", ", pool.second,
              "): pass an id from torch.openreg.graph_pool_handle(), another graph's pool(), or a "
              "torch.openreg.MemPool");
  const c10::DeviceIndex device = currentDevice();
  const c10::Stream stream = currentStream(device);
  TORCH_CHECK(stream.id() != 0,
              "openreg graphs must be captured on a non-default stream (the "
              "current stream is ",
              describe(stream),
              "): capture inside `with torch.openreg.stream(torch.openreg.Stream()):`, or use "
              "torch.openreg.graph(g), which does. After capture, replaying on the default stream "
              "is fine.");
  const c10::MempoolId_t id = pool.first == 0 && pool.second == 0 ? graphPoolHandle() : pool;
  BlockPool& blocks = blockPool(device);
  blocks.retainPool(id, PoolOptions{});
  try {
    capture_ = beginStreamCapture(stream, nativeHandle(stream), captureModeOf(mode), id);
  } catch (...) {
    blocks.releasePool(id);
    throw;
  }
  pool_ = id;
  device_ = device;
  captureStream_ = stream;
}

void GraphImpl::capture_end() {
  TORCH_CHECK(capture_ != nullptr, "openreg: capture_end() called without capture_begin()");
  const c10::Stream current = currentStream(device_);
  TORCH_CHECK(current == captureStream_,
              "Capture must end on the same stream it began on: it "
              "began on ",
              describe(captureStream_), ", the current stream is ", describe(current));
  const std::shared_ptr<StreamCapture> capture = std::move(capture_);
  CapturedGraph graph;
  try {
    graph = endStreamCapture(capture);
  } catch (...) {
    releasePoolMemory();
    throw;
  }
  captureEnded_ = true;
  if (graph.nodes.empty()) {
    TORCH_WARN(
        "The openreg graph is empty: nothing was launched on the capturing stream. This "
        "usually means that the graph was captured on the wrong device or stream.");
  }
  // Kept either way: the executable form is the same object (see instantiate),
  // so keeping it costs nothing; keep_graph only decides when to instantiate.
  graph_ = std::make_shared<const CapturedGraph>(std::move(graph));
  if (!keepGraph_) instantiate();
}

void GraphImpl::instantiate() {
  TORCH_CHECK(captureEnded_, "capture_end() must have been called before calling instantiate()");
  // The recorded nodes are the executable form: nothing to compile.
  exec_ = graph_;
}

void GraphImpl::replay() {
  TORCH_CHECK(captureEnded_,
              "Called OpenRegGraph.replay() without a preceding successful capture.");
  if (exec_ == nullptr) instantiate();
  GraphReplay replayGraph = installedReplay.load();
  TORCH_INTERNAL_ASSERT(replayGraph != nullptr, "openreg: the engine installed no graph replay");
  replayGraph(exec_);
}

void GraphImpl::reset() {
  if (capture_ != nullptr) {
    // A capture still underway ends without a graph.
    const std::shared_ptr<StreamCapture> capture = std::move(capture_);
    try {
      endStreamCapture(capture);
    } catch (const c10::Error&) {  // NOLINT(bugprone-empty-catch): the capture is dropped
    }
    releasePoolMemory();
  }
  graph_ = nullptr;
  exec_ = nullptr;
  if (captureEnded_) {
    captureEnded_ = false;
    releasePoolMemory();
  }
}

void GraphImpl::releasePoolMemory() noexcept {
  BlockPool& blocks = blockPool(device_);
  blocks.releasePool(pool_);
  try {
    // Frees are stream-ordered: replays still queued keep the memory until they ran.
    blocks.returnPoolMemory(pool_);
  } catch (const c10::Error&) {  // NOLINT(bugprone-empty-catch): kept until empty_cache()
  }
}

c10::MempoolId_t GraphImpl::pool() const {
  TORCH_CHECK(captureEnded_, "Called OpenRegGraph.pool() without a preceding successful capture.");
  return pool_;
}

void GraphImpl::enable_debug_mode() { debug_ = true; }

void GraphImpl::debug_dump(const std::string& path) {
  if (!keepGraph_ && !debug_) {
    TORCH_WARN(
        "openreg graph debug not enabled: debug_dump writes the graph of a graph created "
        "with keep_graph=True, or after enable_debug_mode().");
    return;
  }
  TORCH_CHECK(graph_ != nullptr, "openreg: debug_dump: this graph has captured nothing yet");
  std::ofstream file(path);
  TORCH_CHECK(file.good(), "openreg: debug_dump cannot write ", path);
  file << graphDot(*graph_);
  TORCH_CHECK(file.good(), "openreg: debug_dump could not write all of ", path);
}

std::string graphDot(const CapturedGraph& graph) {
  auto quoted = [](const std::string& text) {
    std::string escaped;
    for (char c : text) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += c;
    }
    return "\"" + escaped + "\"";
  };
  std::ostringstream dot;
  dot << "digraph openreg_graph {\n  label="
      << quoted("openreg graph on openreg:" + std::to_string(graph.device) + ", " +
                std::to_string(graph.nodes.size()) + " nodes")
      << ";\n  node [shape=box];\n";
  for (size_t lane = 0; lane < graph.streams.size(); ++lane) {
    dot << "  subgraph cluster_" << lane << " {\n    label="
        << quoted(describe(graph.streams[lane]) + (lane == 0 ? " (capture stream)" : "")) << ";\n";
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const CapturedNode& node = graph.nodes[i];
      if (node.stream != lane) continue;
      dot << "    n" << i
          << " [label=" << quoted(std::to_string(i) + ": " + node.name + " (" + node.kind + ")")
          << "];\n";
    }
    dot << "  }\n";
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (uint32_t dependency : graph.nodes[i].dependencies) {
      dot << "  n" << dependency << " -> n" << i << ";\n";
    }
  }
  dot << "}\n";
  return dot.str();
}

void registerGraphImplementation() {
  static std::once_flag once;
  std::call_once(once, [] {
    // torch looks the implementation up by this name (ATen/core/GraphImplInterface.h),
    // which for PrivateUse1 is the name the backend was renamed to.
    const std::string key = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, false);
    at::GraphImplRegistry()->Register(
        key, [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<GraphImpl>(args);
        });
  });
}

bool currentStreamCapturing() {
  if (!captureUnderway()) return false;
  return captureOf(nativeHandle(currentStream(currentDevice()))) != nullptr;
}

}  // namespace torch_openreg
