// process_group.h — torch.distributed for openreg tensors, on Gloo.
//
// ProcessGroupOpenReg is a c10d::Backend that accepts openreg tensors and runs
// every collective on torch's own ProcessGroupGloo (created in Python and
// handed in: Gloo's headers are not shipped with torch, its c10d::Backend
// interface is). Gloo never sees an openreg tensor: it gets CPU aliases of the
// same bytes at their kernel-view addresses, so it reads and writes device
// memory in place, with no copy.
//
// Ordering follows CUDA's rules, as with ProcessGroupNCCL:
//   * a collective is handed to Gloo by a piece of work launched on the
//     caller's current stream through the engine's launch path (so it is
//     checked for races and profiled like a kernel), so it starts only after
//     the work queued before it there (stream order; no device synchronization);
//   * Work::wait() makes the caller's current stream wait for the collective
//     (the host does not block, except for barrier); later work on that stream
//     runs after it. Without wait(), queued compute overlaps the collective,
//     which Gloo runs on its own threads — the device's communication engine.
// All collectives of one group reach Gloo in the order the host issued them,
// whatever streams they were issued on (a ticket per collective), because
// Gloo pairs the collectives of the ranks by that order.
//
// Failures (a dead peer, Gloo's timeout) fail the Work with an error naming
// this rank; they surface on wait() or at the next synchronization of a
// stream that waited for the collective, and every later collective of the
// group then fails at once instead of waiting for its own timeout.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_openreg {

class CollectiveIssuer;

// The name torch.distributed knows the backend by ("cpu:gloo,openreg:orgloo").
constexpr const char* kProcessGroupBackendName = "orgloo";

class ProcessGroupOpenReg final : public c10d::Backend {
 public:
  // `gloo` is a ProcessGroupGloo of the same ranks; `device` the device the
  // group is bound to (used by barrier), if any.
  ProcessGroupOpenReg(c10::intrusive_ptr<c10d::Backend> gloo, int rank, int size,
                      std::optional<c10::DeviceIndex> device, std::chrono::milliseconds timeout);
  ~ProcessGroupOpenReg() override;

  const std::string getBackendName() const override { return kProcessGroupBackendName; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  uint64_t getSequenceNumberForGroup() override;
  void setSequenceNumberForGroup() override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor& output, at::Tensor& input,
                                                   const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor& output, at::Tensor& input,
                                                   std::vector<int64_t>& outputSplitSizes,
                                                   std::vector<int64_t>& inputSplitSizes,
                                                   const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

 private:
  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::shared_ptr<CollectiveIssuer> issuer_;  // shared with work queued on streams
  std::optional<c10::DeviceIndex> device_;
  c10::intrusive_ptr<Options> options_;
};

}  // namespace torch_openreg
