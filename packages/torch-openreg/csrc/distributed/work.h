// work.h — the c10d::Work of one openreg collective.
//
// As on CUDA, waiting for a collective is stream order, not a host wait:
// wait() makes the caller's current stream wait for the collective (a piece of
// work queued there blocks until Gloo is done, and turns a failure into the
// stream's error); only a barrier and a receive from any source block the
// host. The Work owns the tensors Gloo uses until the collective completes, so
// memory the host frees meanwhile is not reused under Gloo, and its future
// completes (running Python callbacks) only while Python runs.
#pragma once

#include <openreg.h>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace torch_openreg {

class OpenRegWork final : public c10d::Work {
 public:
  OpenRegWork(int rank, c10d::OpType type, std::string description, c10::DeviceIndex device,
              std::vector<at::Tensor> outputs, std::vector<at::Tensor> held, bool blocksHost);
  ~OpenRegWork() override;

  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  void blockCurrentStream() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Whoever asks for the future waits on it (DDP's reducer, on the host).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  int sourceRank() const override;

  const std::string& description() const { return description_; }

  // Chaos scheduling holds stream work until something waits for it. A wait
  // on this Work or its future is a wait for the work that issues the
  // collective, which the runtime cannot see: an event recorded right after
  // that work, queried (a query counts as a wait), tells it.
  void setIssuePoint(orEvent_t event) { issuePoint_ = event; }

  // Called once the collective is over (failure: null on success).
  void finishWith(std::exception_ptr failure, int sourceRank = -1);
  // Runs the callbacks of get_future()'s future (possibly Python code): not
  // once Python is exiting.
  void completeFuture();

 private:
  void rethrowFailure();
  bool waitOnHost(std::chrono::milliseconds timeout);
  void joinCurrentStream();
  void waitOnWorker();
  void demandIssue() const;

  const std::string description_;
  const c10::DeviceIndex device_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> held_;  // every tensor Gloo uses, until it is done
  const bool blocksHost_;
  orEvent_t issuePoint_ = nullptr;  // under chaos scheduling only
  int sourceRank_ = -1;
  std::atomic<bool> done_{false};  // finish() has run (read without the mutex)
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The message of a collective's failure as users see it (without the C++
// backtrace), for errors that name the collective.
std::string messageOf(const std::exception_ptr& failure);

}  // namespace torch_openreg
