// graph_capture.cpp — recording launches as graph nodes, refusing what a
// capture cannot record, and replaying (see graph_capture.h).
#include "engine/graph_capture.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/debug_modes.h"
#include "base/runtime_check.h"
#include "engine/fallback_arguments.h"
#include "engine/kernel_launch.h"
#include "engine/tensor_layout.h"
#include "integration/graph.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

// A recorded launch: the body to run again, and what its LaunchSpec said, for
// the launch path at replay. Tensors are descriptions over the same device
// memory that own none of it: a graph keeps its memory reserved through its
// private pool, as on CUDA, not by holding tensors.
struct LaunchNode final : CapturedWork {
  std::function<void()> body;
  std::string name;
  std::optional<c10::OperatorHandle> op;
  std::vector<at::Tensor> reads;
  std::vector<at::Tensor> writes;
  std::vector<c10::IValue> arguments;
  ActivityKind activity = ActivityKind::Kernel;
  const char* activityLabel = nullptr;

  // This node's LaunchSpec on the replay's stream.
  LaunchSpec specOn(const LaunchContext& context) const {
    LaunchSpec spec{context, op ? OperationName(*op) : OperationName(name), reads, writes};
    spec.arguments = arguments;
    spec.activity = activity;
    spec.activityLabel = activityLabel;
    return spec;
  }
};

// An openreg tensor described without its memory: the same address, storage
// size and layout (undefined for host, sparse and nested tensors, which the
// race detector does not track either).
at::Tensor describing(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.device().type() != c10::DeviceType::PrivateUse1 ||
      tensor.layout() != c10::kStrided || tensor.is_nested() || !tensor.has_storage() ||
      tensor.storage().data() == nullptr) {
    return at::Tensor();
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), tensor.storage().nbytes(),
                       c10::DataPtr(const_cast<void*>(tensor.storage().data()), tensor.device()),
                       nullptr, false);
  return tensorOver(std::move(storage), c10::DispatchKey::PrivateUse1, tensor);
}

std::vector<at::Tensor> describingAll(c10::ArrayRef<at::Tensor> tensors) {
  std::vector<at::Tensor> described;
  described.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) described.push_back(describing(tensor));
  return described;
}

std::shared_ptr<LaunchNode> nodeOf(const LaunchSpec& spec) {
  auto node = std::make_shared<LaunchNode>();
  node->name = spec.operation.str();
  if (spec.operation.op() != nullptr) node->op = *spec.operation.op();
  node->reads = describingAll(spec.reads);
  node->writes = describingAll(spec.writes);
  node->arguments.reserve(spec.arguments.size());
  for (const c10::IValue& argument : spec.arguments) {
    node->arguments.push_back(mapTensors(argument, describing));
  }
  node->activity = spec.activity;
  node->activityLabel = spec.activityLabel;
  return node;
}

const char* kindOf(const LaunchSpec& spec) {
  return spec.activity == ActivityKind::Memcpy ? "memcpy" : "kernel";
}

// A captured launch must be work a replay can run again by itself.
void checkCapturable(const std::shared_ptr<StreamCapture>& capture, const LaunchSpec& spec) {
  if (spec.synchronizes != nullptr || spec.hostWaits) {
    checkStreamWait(spec.context.handle, spec.synchronizes != nullptr
                                             ? spec.synchronizes
                                             : "a copy that waits for the device");
  }
  if (!spec.kernelEnvironment) {
    failCapture(capture, "openreg: " + spec.operation.str() +
                             " cannot be captured into a graph: openreg graphs record kernels and "
                             "copies, not collectives or other work handed to other threads. Run "
                             "it outside the capture.");
  }
}

}  // namespace

bool captureLaunch(const LaunchSpec& spec, std::function<void()>& body) {
  std::shared_ptr<StreamCapture> capture = captureOf(spec.context.handle);
  if (capture == nullptr) return false;
  checkCapturable(capture, spec);
  std::shared_ptr<LaunchNode> node = nodeOf(spec);
  node->body = std::move(body);
  std::string name = node->name;
  capture->append(spec.context.handle, std::move(name), kindOf(spec), std::move(node));
  return true;
}

bool captureCopy(const LaunchSpec& spec, void* destination, const void* source, size_t bytes,
                 orMemcpyKind kind, std::function<void()>& afterCopy) {
  std::shared_ptr<StreamCapture> capture = captureOf(spec.context.handle);
  if (capture == nullptr) return false;
  checkCapturable(capture, spec);
  if (kind != orMemcpyDeviceToDevice) {
    failCapture(capture, "openreg: " + spec.operation.str() +
                             " cannot be captured into a graph: a runtime copy to or from host "
                             "memory is not recorded by openreg graphs; copy with "
                             "Tensor.copy_(..., non_blocking=True) from pinned memory instead.");
  }
  std::shared_ptr<LaunchNode> node = nodeOf(spec);
  // The copy as a replay runs it, on the worker: between the kernel views of
  // the same device addresses. What `afterCopy` keeps alive stays with the graph.
  node->body = [destination, source, bytes, afterCopy = std::move(afterCopy)] {
    void* to = nullptr;
    void* from = nullptr;
    OPENREG_CHECK(orGetKernelPointer(&to, destination));
    OPENREG_CHECK(orGetKernelPointer(&from, source));
    std::memmove(to, from, bytes);
    if (afterCopy != nullptr) afterCopy();
  };
  std::string name = node->name;
  capture->append(spec.context.handle, std::move(name), "memcpy", std::move(node));
  return true;
}

void refuseSynchronousLaunch(const LaunchSpec& spec) {
  const char* waits = spec.synchronizes != nullptr ? spec.synchronizes
                      : spec.hostWaits ? "a copy that waits for the device (non_blocking=False, or "
                                         "host memory that is not pinned)"
                                       : nullptr;
  std::shared_ptr<StreamCapture> capture = captureOf(spec.context.handle);
  if (capture == nullptr) {
    // Another stream: a wait the program asked for is checked by the capture
    // modes; openreg's own synchronous runs (first calls) wait for nothing
    // captured.
    if (waits != nullptr) checkUnsafeCall(waits);
    return;
  }
  if (waits != nullptr) checkStreamWait(spec.context.handle, waits);
  const std::string name = spec.operation.str();
  if (spec.firstCall) {
    failCapture(capture,
                "openreg: " + name +
                    " cannot be captured into a graph yet: this is the first call of the "
                    "operator with these shapes, dtypes and arguments, which openreg runs "
                    "synchronously (to confirm its plan), and a capture cannot wait for work. Warm "
                    "up before capturing: run the code to capture once (CUDA graphs need the same "
                    "warm-up, usually a few iterations on a side stream), then capture it.");
  }
  failCapture(capture, "openreg: " + name +
                           " cannot be captured into a graph: openreg runs it synchronously, "
                           "because its results cannot be known before it runs (a size that "
                           "depends on the data, results that view its inputs, or an operator "
                           "without a meta kernel), and a capture cannot wait for work. Keep it "
                           "out of the captured region.");
}

void checkCrossDeviceOrdering(const c10::Stream& waiter, const c10::Stream& producer) {
  if (!captureUnderway()) return;
  for (const c10::Stream& stream : {waiter, producer}) {
    if (std::shared_ptr<StreamCapture> capture = captureOf(nativeHandle(stream))) {
      failCapture(capture,
                  "openreg: a copy between devices cannot be captured into a graph: an openreg "
                  "graph records the work of one device. Copy between devices outside the "
                  "capture.");
    }
  }
}

void replayGraph(const std::shared_ptr<const CapturedGraph>& graph) {
  const LaunchContext context = LaunchContext::forDevice(graph->device);
  if (debugModeOn(kDebugRaces)) {
    // One launch per node: the detector checks each with its own accesses.
    for (const CapturedNode& node : graph->nodes) {
      const auto& launch = static_cast<const LaunchNode&>(*node.work);
      launchOnDevice(launch.specOn(context), launch.body);
    }
    return;
  }
  LaunchSpec spec{context, "openreg graph replay"};
  spec.activityLabel = "openreg graph replay";
  launchOnDevice(spec, [graph] {
    for (const CapturedNode& node : graph->nodes) {
      static_cast<const LaunchNode&>(*node.work).body();
    }
  });
}

namespace {
const bool installed = [] {
  installGraphReplay(&replayGraph);
  return true;
}();
}  // namespace

}  // namespace torch_openreg
