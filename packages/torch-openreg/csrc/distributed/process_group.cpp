// process_group.cpp — ProcessGroupOpenReg: argument checks and one method
// per collective, each naming what it reads and writes and the Gloo call to
// make; collective_issue.cpp launches them, work.cpp waits for them.
#include "distributed/process_group.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <optional>
#include <utility>

#include "base/device.h"
#include "distributed/collective_issue.h"
#include "distributed/work.h"
#include "engine/kernel_context.h"
#include "engine/kernel_launch.h"

namespace torch_openreg {
namespace {

// The tensors Gloo gets: for an openreg tensor, the engine's CPU alias of the
// same bytes at their kernel-view address (it owns nothing: the Work keeps the
// openreg tensor alive, and it has no Python object, so Gloo's threads, which
// drop the tensors of a finished collective at any time, even while Python
// exits, never need the GIL for it); CPU tensors as they are.
class GlooAliases {
 public:
  explicit GlooAliases(std::optional<c10::DeviceIndex> device) {
    if (device) context_.emplace(*device);
  }
  at::Tensor of(const at::Tensor& tensor) { return context_ ? context_->alias(tensor) : tensor; }
  std::vector<at::Tensor> of(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> aliases;
    aliases.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) aliases.push_back(of(tensor));
    return aliases;
  }
  std::vector<std::vector<at::Tensor>> of(const std::vector<std::vector<at::Tensor>>& lists) {
    std::vector<std::vector<at::Tensor>> aliases;
    aliases.reserve(lists.size());
    for (const auto& list : lists) aliases.push_back(of(list));
    return aliases;
  }

 private:
  std::optional<KernelContext> context_;
};

// ---- Argument checks (on the host, so mistakes raise where they are made) ------------
struct Placement {
  std::optional<c10::DeviceIndex> device;  // nullopt: every tensor is on the CPU
};

void collect(std::vector<at::Tensor>& into, const std::vector<at::Tensor>& tensors) {
  into.insert(into.end(), tensors.begin(), tensors.end());
}
void collect(std::vector<at::Tensor>& into, const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& list : lists) collect(into, list);
}

Placement placementOf(const std::string& what, const std::vector<at::Tensor>& tensors) {
  std::optional<c10::Device> openreg;
  bool cpu = false;
  for (const at::Tensor& tensor : tensors) {
    TORCH_CHECK(tensor.defined(), kProcessGroupBackendName, ": ", what, " got an undefined tensor");
    const c10::Device device = tensor.device();
    if (device.is_cpu()) {
      cpu = true;
      continue;
    }
    TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, kProcessGroupBackendName, ": ", what,
                " supports openreg and CPU tensors, got a tensor on ", device);
    TORCH_CHECK(!openreg || *openreg == device, kProcessGroupBackendName, ": ", what,
                " got tensors on ", *openreg, " and ", device,
                "; every tensor of one call must be on the same device");
    TORCH_CHECK(tensor.layout() == c10::kStrided, kProcessGroupBackendName, ": ", what,
                " supports dense (strided) openreg tensors, got a ", tensor.layout(), " tensor");
    TORCH_CHECK(tensor.is_non_overlapping_and_dense(), kProcessGroupBackendName, ": ", what,
                " needs dense tensors (no gaps or overlaps between elements), got sizes ",
                tensor.sizes(), " with strides ", tensor.strides(), "; pass tensor.contiguous()");
    openreg = device;
  }
  TORCH_CHECK(!(openreg && cpu), kProcessGroupBackendName, ": ", what, " got tensors on ", *openreg,
              " and on the CPU; every tensor of one call must be on the same device");
  if (openreg) return Placement{openreg->index()};
  return Placement{};
}

// The single-tensor collectives between one rank's part and the world's whole
// (all_gather_into_tensor: output is the whole; reduce_scatter_tensor: input
// is): the whole holds world size times the part's elements, of one dtype.
void checkWorldSizedPair(const char* name, const at::Tensor& input, const at::Tensor& output,
                         bool outputIsWhole, int worldSize) {
  const at::Tensor& whole = outputIsWhole ? output : input;
  const at::Tensor& part = outputIsWhole ? input : output;
  TORCH_CHECK(whole.numel() == part.numel() * worldSize, kProcessGroupBackendName, ": ", name,
              " needs an ", outputIsWhole ? "output" : "input", " of world size (", worldSize,
              ") times the ", outputIsWhole ? "input" : "output", "'s ", part.numel(),
              " elements, got ", whole.numel());
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), kProcessGroupBackendName, ": ", name,
              " needs input and output of one dtype, got ", input.scalar_type(), " and ",
              output.scalar_type());
}

}  // namespace

// ---- The backend ------------------------------------------------------------------------
ProcessGroupOpenReg::ProcessGroupOpenReg(c10::intrusive_ptr<c10d::Backend> gloo, int rank, int size,
                                         std::optional<c10::DeviceIndex> device,
                                         std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      gloo_(std::move(gloo)),
      issuer_(std::make_shared<CollectiveIssuer>(rank, size, gloo_.get())),
      device_(device),
      options_(c10::make_intrusive<Options>(kProcessGroupBackendName, timeout)) {
  TORCH_CHECK(gloo_, kProcessGroupBackendName, ": a Gloo process group is required");
  if (device_) checkedDevice(*device_);
  init();
}

ProcessGroupOpenReg::~ProcessGroupOpenReg() {
  // An unmatched send/receive would keep its helper waiting until Gloo's timeout.
  for (auto& work : issuer_->detachGloo()) work->abort();
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupOpenReg::getBackendOptions() {
  return options_;
}

void ProcessGroupOpenReg::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
  gloo_->setTimeout(timeout);
}

uint64_t ProcessGroupOpenReg::getSequenceNumberForGroup() {
  return gloo_->getSequenceNumberForGroup();
}

void ProcessGroupOpenReg::setSequenceNumberForGroup() { gloo_->setSequenceNumberForGroup(); }

c10d::ErrorType ProcessGroupOpenReg::getError() {
  return issuer_->broken() ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
}

void ProcessGroupOpenReg::abort() { gloo_->abort(); }

void ProcessGroupOpenReg::shutdown() { gloo_->shutdown(); }

namespace {

// One call: its description and the tensors it reads and writes (the written
// ones are what Work::result() returns).
struct CallSpec {
  c10d::OpType type;
  std::string name;
  std::vector<at::Tensor> reads;
  std::vector<at::Tensor> writes;
  bool blocksHost = false;

  // Every tensor of the call, which the Work holds until Gloo is done.
  std::vector<at::Tensor> tensors() const {
    std::vector<at::Tensor> all = reads;
    all.insert(all.end(), writes.begin(), writes.end());
    return all;
  }
};

}  // namespace

// Runs `makeCall(aliases)` — a Gloo call over the tensors `aliases` gives
// Gloo — in stream order on the tensors' device, or directly for CPU tensors.
template <typename MakeCall>
static c10::intrusive_ptr<c10d::Work> launch(CollectiveIssuer& issuer, c10d::Backend& gloo,
                                             CallSpec spec,
                                             std::optional<c10::DeviceIndex> barrierDevice,
                                             MakeCall&& makeCall) {
  std::vector<at::Tensor> held = spec.tensors();
  Placement placement = placementOf(spec.name, held);
  if (!placement.device && barrierDevice) placement.device = barrierDevice;
  if (!placement.device) {
    GlooAliases passThrough(std::nullopt);
    return makeCall(passThrough)(gloo);  // CPU tensors: Gloo as it is
  }
  issuer.throwIfBroken();
  const c10::DeviceIndex device = *placement.device;
  GlooAliases aliases(device);
  GlooCall call = makeCall(aliases);
  const std::string description =
      spec.name + " on openreg:" + std::to_string(static_cast<int>(device));
  auto work = c10::make_intrusive<OpenRegWork>(issuer.rank(), spec.type, description, device,
                                               spec.writes, std::move(held), spec.blocksHost);
  const std::string operation = std::string(kProcessGroupBackendName) + " " + spec.name;
  LaunchSpec launchSpec{LaunchContext::forDevice(device), operation, spec.reads, spec.writes};
  // The profiler names the device event after the c10d operator issuing it.
  launchSpec.activity = ActivityKind::Collective;
  launchSpec.kernelEnvironment = false;  // it only hands the collective to Gloo
  issuer.issue(launchSpec, work, std::move(call));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::broadcast(std::vector<at::Tensor>& tensors,
                                                              const c10d::BroadcastOptions& opts) {
  return launch(*issuer_, *gloo_, {c10d::OpType::BROADCAST, "broadcast", tensors, tensors},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.broadcast(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::allreduce(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  return launch(*issuer_, *gloo_, {c10d::OpType::ALLREDUCE, "all_reduce", tensors, tensors},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.allreduce(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return launch(*issuer_, *gloo_,
                {c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, tensors},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.allreduce_coalesced(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  return launch(*issuer_, *gloo_, {c10d::OpType::REDUCE, "reduce", tensors, tensors}, std::nullopt,
                [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.reduce(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> results;
  collect(results, outputs);
  return launch(*issuer_, *gloo_, {c10d::OpType::ALLGATHER, "all_gather", inputs, results},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.allgather(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::all_gather_single(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkWorldSizedPair("all_gather_into_tensor", input, output, /*outputIsWhole=*/true, getSize());
  return launch(*issuer_, *gloo_,
                {c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {input}, {output}},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [output = view.of(output), input = view.of(input),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.all_gather_single(output, input, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> results;
  collect(results, outputs);
  return launch(*issuer_, *gloo_,
                {c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", inputs, results},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.allgather_coalesced(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return launch(*issuer_, *gloo_,
                {c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, "all_gather_into_tensor_coalesced",
                 inputs, outputs},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.all_gather_single_coalesced(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> results;
  collect(results, outputs);
  return launch(*issuer_, *gloo_, {c10d::OpType::GATHER, "gather", inputs, results}, std::nullopt,
                [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.gather(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  std::vector<at::Tensor> read;
  collect(read, inputs);
  return launch(*issuer_, *gloo_, {c10d::OpType::SCATTER, "scatter", read, outputs}, std::nullopt,
                [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.scatter(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> read;
  collect(read, inputs);
  return launch(*issuer_, *gloo_, {c10d::OpType::REDUCE_SCATTER, "reduce_scatter", read, outputs},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.reduce_scatter(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce_scatter_single(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkWorldSizedPair("reduce_scatter_tensor", input, output, /*outputIsWhole=*/false, getSize());
  return launch(*issuer_, *gloo_,
                {c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {input}, {output}},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [output = view.of(output), input = view.of(input),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.reduce_scatter_single(output, input, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return launch(*issuer_, *gloo_,
                {c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "reduce_scatter_tensor_coalesced",
                 inputs, outputs},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.reduce_scatter_single_coalesced(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::all_to_all_single(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  return launch(
      *issuer_, *gloo_, {c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {input}, {output}},
      std::nullopt, [&](GlooAliases& view) -> GlooCall {
        return [output = view.of(output), input = view.of(input), outputSplitSizes, inputSplitSizes,
                opts](c10d::Backend& gloo) mutable {
          return gloo.all_to_all_single(output, input, outputSplitSizes, inputSplitSizes, opts);
        };
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions& opts) {
  return launch(*issuer_, *gloo_, {c10d::OpType::ALLTOALL, "all_to_all", inputs, outputs},
                std::nullopt, [&](GlooAliases& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.alltoall(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::send(std::vector<at::Tensor>& tensors,
                                                         int dstRank, int tag) {
  CallSpec spec{c10d::OpType::SEND, "send to rank " + std::to_string(dstRank), tensors, {}};
  return launch(*issuer_, *gloo_, std::move(spec), std::nullopt,
                [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), dstRank, tag](c10d::Backend& gloo) mutable {
                    return gloo.send(tensors, dstRank, tag);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::recv(std::vector<at::Tensor>& tensors,
                                                         int srcRank, int tag) {
  CallSpec spec{c10d::OpType::RECV, "recv from rank " + std::to_string(srcRank), {}, tensors};
  return launch(*issuer_, *gloo_, std::move(spec), std::nullopt,
                [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), srcRank, tag](c10d::Backend& gloo) mutable {
                    return gloo.recv(tensors, srcRank, tag);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                  int tag) {
  CallSpec spec{c10d::OpType::RECVANYSOURCE, "recv from any rank", {}, tensors};
  spec.blocksHost = true;  // the host wants the source rank right after wait()
  return launch(*issuer_, *gloo_, std::move(spec), std::nullopt,
                [&](GlooAliases& view) -> GlooCall {
                  return [tensors = view.of(tensors), tag](c10d::Backend& gloo) mutable {
                    return gloo.recvAnysource(tensors, tag);
                  };
                });
}

// A barrier is ordered after the work queued on the current stream of the
// group's device, and its wait() blocks the host (as NCCL's barrier does).
c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::barrier(const c10d::BarrierOptions& opts) {
  c10::DeviceIndex device = device_ ? *device_ : currentDevice();
  if (opts.device && opts.device->type() == c10::DeviceType::PrivateUse1 &&
      opts.device->has_index()) {
    device = opts.device->index();
  }
  CallSpec spec{c10d::OpType::BARRIER, "barrier", {}, {}};
  spec.blocksHost = true;
  return launch(*issuer_, *gloo_, std::move(spec), device, [&](GlooAliases&) -> GlooCall {
    return [opts](c10d::Backend& gloo) { return gloo.barrier(opts); };
  });
}

void ProcessGroupOpenReg::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  gloo_->monitoredBarrier(opts, waitAllRanks);  // a host-side protocol: Gloo's own
}

}  // namespace torch_openreg
