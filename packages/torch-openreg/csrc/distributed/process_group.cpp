// process_group.cpp — ProcessGroupOpenReg: aliases, tickets, completion.
//
// The life of one collective on openreg tensors:
//   1. host: check the arguments, take the next ticket, make CPU aliases of
//      the tensors and enqueue the "issue" work on the current stream;
//   2. stream worker: when the work before it has run and every earlier
//      ticket has been issued, hand the aliases to Gloo (which only enqueues
//      the collective on its own threads) and return;
//   3. Gloo thread: run the collective on device memory, complete its future;
//      our Work completes from that callback (Gloo works without a future,
//      such as send/recv, are waited for by a helper thread);
//   4. Work::wait(): enqueue on the caller's current stream a piece of work
//      that waits until the Work has completed (and turns a failure into the
//      stream's error).
// The Work owns the tensors until the collective completes, so memory the
// host frees meanwhile is not reused under Gloo.
#include "integration/process_group.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

#include "base/address_ranges.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "base/device_activity.h"
#include "base/gil.h"
#include "base/python_exit.h"
#include "base/runtime_check.h"
#include "integration/stream.h"

namespace torch_openreg {
namespace {

using GlooCall = std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& gloo)>;

// The future of a Gloo work, or null: Gloo's send/recv works and some of its
// composite collectives (reduce_scatter_tensor) have none and complete only
// inside their wait().
c10::intrusive_ptr<c10::ivalue::Future> futureOf(c10d::Work& work) {
  try {
    return work.getFuture();
  } catch (const c10::Error&) {
    return nullptr;
  }
}

// Set while a stream worker hands a collective to Gloo: a completion seen
// there must not run user callbacks (they may need the GIL, which a stream
// worker must never wait for).
thread_local bool onStreamWorker = false;

std::string messageOf(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const c10::Error& error) {
    return error.what_without_backtrace();
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "unknown error";
  }
}

std::exception_ptr distError(const std::string& message) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message));
}

// ---- Helper threads -----------------------------------------------------------
// Run tasks that block (waiting for a send/recv) or may need the GIL (future
// callbacks observed on a stream worker). Every task gets a thread of its own
// while it runs — an idle one, or a new one — so one pending receive never
// delays the completion of another. Threads are detached and share the state
// with the pool, so a pool may go away on any thread, even one of its own.
class HelperThreads {
 public:
  HelperThreads() : state_(std::make_shared<State>()) {}
  ~HelperThreads() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopping = true;
    }
    state_->ready.notify_all();
  }
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;

  void run(std::function<void()> task) {
    bool spawn = false;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->tasks.push_back(std::move(task));
      spawn = state_->tasks.size() > state_->idle;
    }
    if (spawn) {
      std::thread(&HelperThreads::loop, state_).detach();
    } else {
      state_->ready.notify_one();
    }
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::function<void()>> tasks;
    size_t idle = 0;
    bool stopping = false;
  };

  static void loop(std::shared_ptr<State> state) {
    std::unique_lock<std::mutex> lock(state->mutex);
    while (true) {
      ++state->idle;
      state->ready.wait(lock, [&] { return !state->tasks.empty() || state->stopping; });
      --state->idle;
      if (state->tasks.empty()) return;  // stopping
      std::function<void()> task = std::move(state->tasks.front());
      state->tasks.pop_front();
      lock.unlock();
      task();
      letGo(task);  // what it captured, before sleeping (see base/python_exit.h)
      lock.lock();
    }
  }

  std::shared_ptr<State> state_;
};

// ---- Work ------------------------------------------------------------------------
class OpenRegWork final : public c10d::Work {
 public:
  OpenRegWork(int rank, c10d::OpType type, std::string description, c10::DeviceIndex device,
              std::vector<at::Tensor> outputs, std::vector<at::Tensor> held, bool blocksHost)
      : c10d::Work(rank, type),
        description_(std::move(description)),
        device_(device),
        outputs_(std::move(outputs)),
        held_(std::move(held)),
        blocksHost_(blocksHost),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}
  ~OpenRegWork() override { notifyStreamOrder(&StreamOrderObserver::workReleased, this); }

  // As on CUDA: the caller's current stream waits for the collective; the
  // host only blocks for a barrier. A failure already known is raised here.
  bool wait(std::chrono::milliseconds timeout) override {
    if (blocksHost_) return waitOnHost(timeout);
    rethrowFailure();
    joinCurrentStream();
    return true;
  }
  void synchronize() override { joinCurrentStream(); }
  void blockCurrentStream() override { joinCurrentStream(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(completed_ && sourceRank_ >= 0,
                "sourceRank() is known only once a receive from any source has completed; "
                "call wait() first");
    return sourceRank_;
  }

  const std::string& description() const { return description_; }

  // Called once the collective is over (failure: null on success).
  void finishWith(std::exception_ptr failure, int sourceRank = -1) {
    std::vector<at::Tensor> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sourceRank_ = sourceRank;
      released.swap(held_);
    }
    letGo(released);  // Gloo is done with the memory: the host may reuse it
    finish(std::move(failure));
    done_.store(true, std::memory_order_release);
  }
  // Runs the callbacks of get_future()'s future (possibly Python code): not
  // once Python is exiting.
  void completeFuture() {
    whilePythonRuns([this] {
      const std::exception_ptr failure = exception();
      if (failure) {
        future_->setError(failure);
      } else {
        future_->markCompleted(c10::IValue(outputs_));
      }
    });
  }

 private:
  void rethrowFailure() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }

  bool waitOnHost(std::chrono::milliseconds timeout) {
    {
      GilReleasedIfHeld released;  // Gloo threads may run Python future callbacks
      std::unique_lock<std::mutex> lock(mutex_);
      const auto done = [&] { return completed_; };
      if (timeout == kNoTimeout) {
        cv_.wait(lock, done);
      } else if (!cv_.wait_for(lock, timeout, done)) {
        C10_THROW_ERROR(DistBackendError, description_ + " did not complete within " +
                                              std::to_string(timeout.count()) + " ms");
      }
    }
    rethrowFailure();
    notifyStreamOrder(&StreamOrderObserver::eventSynchronized, this);
    return true;
  }

  // The race detector learns the order too (the collective's accesses were
  // reported on the stream it was issued on, with this Work as the handle).
  void joinCurrentStream() {
    const c10::Stream stream = currentStream(device_);
    notifyStreamOrder(&StreamOrderObserver::streamWaitedForEvent, stream, this);
    joinStream(stream);
  }

  // Later work on `stream` runs after the collective; a failure becomes the
  // stream's error, raised by its next synchronizing call.
  void joinStream(const c10::Stream& stream) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_ && !exception_) return;
    }
    auto self = c10::intrusive_ptr<OpenRegWork>::reclaim_copy(this);
    DeviceActivityKindScope profiledAs(ActivityKind::Collective, "orgloo wait");
    LaunchRecording recording(stream);
    OPENREG_CHECK(
        openreg::launchHostFunc(nativeHandle(stream), [self, activity = recording.takeShared()] {
          DeviceActivityTiming timing(activity);
          self->waitOnWorker();
        }));
  }

  // Small collectives finish within microseconds of being issued: a short spin
  // (yielding between rounds, as the runtime's own waits do) saves the stream
  // worker a sleep and a wake-up for them.
  void waitOnWorker() {
    const auto deadline = std::chrono::steady_clock::now() + kJoinSpin;
    while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_; });
    if (exception_) orSetKernelError(messageOf(exception_).c_str());
  }

  static constexpr auto kJoinSpin = std::chrono::microseconds(50);

  const std::string description_;
  const c10::DeviceIndex device_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> held_;  // every tensor Gloo uses, until it is done
  const bool blocksHost_;
  int sourceRank_ = -1;
  std::atomic<bool> done_{false};  // finish() has run (read without the mutex)
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// ---- CPU aliases ---------------------------------------------------------------------
// The tensors Gloo gets: for an openreg tensor, a CPU tensor over the same bytes
// at their kernel-view address (same sizes, strides and offset; it owns
// nothing — the Work keeps the openreg tensor alive); CPU tensors as they are.
// An alias has no Python object, so Gloo's threads, which drop the tensors of a
// finished collective at any time (even while Python exits), never need the GIL
// for it (see base/python_exit.h).
class GlooView {
 public:
  explicit GlooView(std::optional<c10::DeviceIndex> device) : device_(device) {}
  at::Tensor of(const at::Tensor& tensor) const {
    if (!device_ || tensor.device().type() != c10::DeviceType::PrivateUse1) return tensor;
    const c10::Storage& original = tensor.storage();
    void* kernelData =
        original.data() == nullptr ? nullptr : toKernelView(original.data(), *device_);
    c10::Storage storage(c10::Storage::use_byte_size_t(), original.nbytes(),
                         c10::DataPtr(kernelData, c10::Device(c10::DeviceType::CPU)),
                         /*allocator=*/nullptr, /*resizable=*/false);
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), tensor.dtype());
    impl->set_sizes_and_strides(tensor.sizes(), tensor.strides(), tensor.storage_offset());
    return at::Tensor(std::move(impl));
  }
  std::vector<at::Tensor> of(const std::vector<at::Tensor>& tensors) const {
    std::vector<at::Tensor> views;
    views.reserve(tensors.size());
    for (const at::Tensor& tensor : tensors) views.push_back(of(tensor));
    return views;
  }
  std::vector<std::vector<at::Tensor>> of(const std::vector<std::vector<at::Tensor>>& lists) const {
    std::vector<std::vector<at::Tensor>> views;
    views.reserve(lists.size());
    for (const auto& list : lists) views.push_back(of(list));
    return views;
  }

 private:
  std::optional<c10::DeviceIndex> device_;
};

}  // namespace

// ---- Engine: ticket order, completion, failure --------------------------------------
struct ProcessGroupOpenReg::Engine : std::enable_shared_from_this<Engine> {
  Engine(int rank, int size, c10d::Backend* gloo) : rank(rank), size(size), gloo(gloo) {}

  const int rank;
  const int size;

  std::mutex hostOrder;     // host threads: a ticket and its enqueue go together
  uint64_t nextTicket = 0;  // guarded by hostOrder

  std::mutex mutex;  // guards what follows
  std::condition_variable turn;
  uint64_t issued = 0;          // tickets already handed to Gloo
  c10d::Backend* gloo;          // null once the backend is destroyed
  std::exception_ptr failure;   // the first communication failure: the group is broken
  std::unordered_set<c10d::Work*> waitedOn;  // Gloo works a helper waits for

  HelperThreads helpers;

  std::string prefix() const {
    return std::string(kProcessGroupBackendName) + " rank " + std::to_string(rank) + " of " +
           std::to_string(size) + ": ";
  }

  void throwIfBroken() {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure) {
      C10_THROW_ERROR(DistBackendError,
                      prefix() + "the process group is unusable after an earlier failure (" +
                          messageOf(failure) +
                          "); destroy it and create a new one once every rank is back");
    }
  }

  // On the stream worker: hand the collective to Gloo in ticket order.
  void issueInTurn(uint64_t ticket, const c10::intrusive_ptr<OpenRegWork>& work,
                   const GlooCall& call) {
    c10::intrusive_ptr<c10d::Work> glooWork;
    std::exception_ptr refused;
    {
      std::unique_lock<std::mutex> lock(mutex);
      turn.wait(lock, [&] { return issued == ticket; });
      if (failure) {
        refused = distError(prefix() + work->description() +
                            " was not started: an earlier collective failed (" +
                            messageOf(failure) + ")");
      } else if (gloo == nullptr) {
        refused = distError(prefix() + work->description() +
                            " was not started: the process group was destroyed first");
      } else {
        try {
          glooWork = call(*gloo);
        } catch (...) {  // Gloo refused the arguments: only this collective fails
          refused = distError(prefix() + work->description() +
                              " failed: " + messageOf(std::current_exception()));
        }
      }
      ++issued;
    }
    turn.notify_all();
    onStreamWorker = true;
    if (!refused) {
      try {
        watch(work, glooWork);
      } catch (...) {
        refused = distError(prefix() + work->description() +
                            " failed: " + messageOf(std::current_exception()));
      }
    }
    if (refused) complete(work, refused);
    onStreamWorker = false;
  }

  void watch(const c10::intrusive_ptr<OpenRegWork>& work,
             const c10::intrusive_ptr<c10d::Work>& glooWork) {
    auto self = shared_from_this();
    if (auto future = futureOf(*glooWork)) {
      // The callback is destroyed on Gloo's thread after it has run, out of our
      // hands: the work it captured is let go of here, through the gate.
      auto pending = std::make_shared<c10::intrusive_ptr<OpenRegWork>>(work);
      future->addCallback([self, pending](c10::ivalue::Future& done) {
        self->completeFromGloo(*pending, done.hasError() ? done.exception_ptr() : nullptr);
        letGo(*pending);
      });
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      waitedOn.insert(glooWork.get());
    }
    helpers.run([self, work, glooWork] {
      std::exception_ptr failure;
      try {
        glooWork->wait();
      } catch (...) {
        failure = std::current_exception();
      }
      int source = -1;
      if (!failure && work->retrieveOpType() == c10d::OpType::RECVANYSOURCE) {
        source = glooWork->sourceRank();
      }
      {
        std::lock_guard<std::mutex> lock(self->mutex);
        self->waitedOn.erase(glooWork.get());
      }
      self->completeFromGloo(work, failure, source);
    });
  }

  // A failure reported by Gloo while running a collective breaks the group.
  void completeFromGloo(const c10::intrusive_ptr<OpenRegWork>& work, std::exception_ptr failure,
                        int source = -1) {
    if (failure) {
      failure = distError(prefix() + work->description() + " failed: " + messageOf(failure));
      std::lock_guard<std::mutex> lock(mutex);
      if (!this->failure) this->failure = failure;
    }
    complete(work, failure, source);
  }

  void complete(const c10::intrusive_ptr<OpenRegWork>& work, std::exception_ptr failure,
                int source = -1) {
    work->finishWith(std::move(failure), source);
    if (onStreamWorker) {
      helpers.run([work] { work->completeFuture(); });
    } else {
      work->completeFuture();
    }
  }
};

namespace {

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
      engine_(std::make_shared<Engine>(rank, size, gloo_.get())),
      device_(device),
      options_(c10::make_intrusive<Options>(kProcessGroupBackendName, timeout)) {
  TORCH_CHECK(gloo_, kProcessGroupBackendName, ": a Gloo process group is required");
  if (device_) checkedDevice(*device_);
  init();
}

ProcessGroupOpenReg::~ProcessGroupOpenReg() {
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
  {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    engine_->gloo = nullptr;  // collectives not yet handed to Gloo now fail
    for (c10d::Work* work : engine_->waitedOn) {
      pending.push_back(c10::intrusive_ptr<c10d::Work>::reclaim_copy(work));
    }
  }
  // An unmatched send/receive would keep its helper waiting until Gloo's timeout.
  for (auto& work : pending) work->abort();
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
  std::lock_guard<std::mutex> lock(engine_->mutex);
  return engine_->failure ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
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

// Runs `makeCall(view)` — a Gloo call over the tensors `view` gives Gloo — in
// stream order on the tensors' device, or directly for CPU tensors.
template <typename MakeCall>
static c10::intrusive_ptr<c10d::Work> launch(ProcessGroupOpenReg::Engine& engine,
                                             c10d::Backend& gloo, CallSpec spec,
                                             std::optional<c10::DeviceIndex> barrierDevice,
                                             MakeCall&& makeCall) {
  std::vector<at::Tensor> held = spec.tensors();
  Placement placement = placementOf(spec.name, held);
  if (!placement.device && barrierDevice) placement.device = barrierDevice;
  if (!placement.device) {
    GlooView passThrough(std::nullopt);
    return makeCall(passThrough)(gloo);  // CPU tensors: Gloo as it is
  }
  engine.throwIfBroken();
  const c10::DeviceIndex device = *placement.device;
  GlooView view(device);
  GlooCall call = makeCall(view);
  const std::string description =
      spec.name + " on openreg:" + std::to_string(static_cast<int>(device));
  auto work = c10::make_intrusive<OpenRegWork>(engine.rank, spec.type, description, device,
                                               spec.writes, std::move(held), spec.blocksHost);
  markDeviceUsed(device);
  const c10::Stream stream = currentStream(device);
  // Before the collective is queued: in error mode a race raises here.
  const std::string operation = std::string(kProcessGroupBackendName) + " " + spec.name;
  notifyStreamOrder(&StreamOrderObserver::workLaunched, work.get(), operation.c_str(), stream,
                    c10::ArrayRef<at::Tensor>(spec.reads), c10::ArrayRef<at::Tensor>(spec.writes));
  auto shared = engine.shared_from_this();
  std::lock_guard<std::mutex> order(engine.hostOrder);
  const uint64_t ticket = engine.nextTicket++;
  // The profiler names the device event after the c10d operator issuing it.
  DeviceActivityKindScope profiledAs(ActivityKind::Collective, nullptr);
  LaunchRecording recording(stream);
  const orError_t status = openreg::launchHostFunc(
      nativeHandle(stream),
      [shared, work, call = std::move(call), ticket, activity = recording.takeShared()] {
        DeviceActivityTiming timing(activity);
        shared->issueInTurn(ticket, work, call);
      });
  if (status != orSuccess) {
    --engine.nextTicket;  // nobody waits for it: no later ticket exists yet
    OPENREG_CHECK(status);
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::broadcast(std::vector<at::Tensor>& tensors,
                                                              const c10d::BroadcastOptions& opts) {
  return launch(*engine_, *gloo_, {c10d::OpType::BROADCAST, "broadcast", tensors, tensors},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.broadcast(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::allreduce(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  return launch(*engine_, *gloo_, {c10d::OpType::ALLREDUCE, "all_reduce", tensors, tensors},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.allreduce(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return launch(*engine_, *gloo_,
                {c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced", tensors, tensors},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [tensors = view.of(tensors), opts](c10d::Backend& gloo) mutable {
                    return gloo.allreduce_coalesced(tensors, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::ReduceOptions& opts) {
  return launch(*engine_, *gloo_, {c10d::OpType::REDUCE, "reduce", tensors, tensors}, std::nullopt,
                [&](GlooView& view) -> GlooCall {
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
  return launch(*engine_, *gloo_, {c10d::OpType::ALLGATHER, "all_gather", inputs, results},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.allgather(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::all_gather_single(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkWorldSizedPair("all_gather_into_tensor", input, output, /*outputIsWhole=*/true, getSize());
  return launch(*engine_, *gloo_,
                {c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {input}, {output}},
                std::nullopt, [&](GlooView& view) -> GlooCall {
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
  return launch(*engine_, *gloo_,
                {c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced", inputs, results},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.allgather_coalesced(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return launch(*engine_, *gloo_,
                {c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, "all_gather_into_tensor_coalesced",
                 inputs, outputs},
                std::nullopt, [&](GlooView& view) -> GlooCall {
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
  return launch(*engine_, *gloo_, {c10d::OpType::GATHER, "gather", inputs, results}, std::nullopt,
                [&](GlooView& view) -> GlooCall {
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
  return launch(*engine_, *gloo_, {c10d::OpType::SCATTER, "scatter", read, outputs}, std::nullopt,
                [&](GlooView& view) -> GlooCall {
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
  return launch(*engine_, *gloo_, {c10d::OpType::REDUCE_SCATTER, "reduce_scatter", read, outputs},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.reduce_scatter(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce_scatter_single(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkWorldSizedPair("reduce_scatter_tensor", input, output, /*outputIsWhole=*/false, getSize());
  return launch(*engine_, *gloo_,
                {c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {input}, {output}},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [output = view.of(output), input = view.of(input),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.reduce_scatter_single(output, input, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::reduce_scatter_single_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return launch(*engine_, *gloo_,
                {c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "reduce_scatter_tensor_coalesced",
                 inputs, outputs},
                std::nullopt, [&](GlooView& view) -> GlooCall {
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
      *engine_, *gloo_, {c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {input}, {output}},
      std::nullopt, [&](GlooView& view) -> GlooCall {
        return [output = view.of(output), input = view.of(input), outputSplitSizes, inputSplitSizes,
                opts](c10d::Backend& gloo) mutable {
          return gloo.all_to_all_single(output, input, outputSplitSizes, inputSplitSizes, opts);
        };
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions& opts) {
  return launch(*engine_, *gloo_, {c10d::OpType::ALLTOALL, "all_to_all", inputs, outputs},
                std::nullopt, [&](GlooView& view) -> GlooCall {
                  return [outputs = view.of(outputs), inputs = view.of(inputs),
                          opts](c10d::Backend& gloo) mutable {
                    return gloo.alltoall(outputs, inputs, opts);
                  };
                });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::send(std::vector<at::Tensor>& tensors,
                                                         int dstRank, int tag) {
  CallSpec spec{c10d::OpType::SEND, "send to rank " + std::to_string(dstRank), tensors, {}};
  return launch(*engine_, *gloo_, std::move(spec), std::nullopt, [&](GlooView& view) -> GlooCall {
    return [tensors = view.of(tensors), dstRank, tag](c10d::Backend& gloo) mutable {
      return gloo.send(tensors, dstRank, tag);
    };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::recv(std::vector<at::Tensor>& tensors,
                                                         int srcRank, int tag) {
  CallSpec spec{c10d::OpType::RECV, "recv from rank " + std::to_string(srcRank), {}, tensors};
  return launch(*engine_, *gloo_, std::move(spec), std::nullopt, [&](GlooView& view) -> GlooCall {
    return [tensors = view.of(tensors), srcRank, tag](c10d::Backend& gloo) mutable {
      return gloo.recv(tensors, srcRank, tag);
    };
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOpenReg::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                  int tag) {
  CallSpec spec{c10d::OpType::RECVANYSOURCE, "recv from any rank", {}, tensors};
  spec.blocksHost = true;  // the host wants the source rank right after wait()
  return launch(*engine_, *gloo_, std::move(spec), std::nullopt, [&](GlooView& view) -> GlooCall {
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
  return launch(*engine_, *gloo_, std::move(spec), device, [&](GlooView&) -> GlooCall {
    return [opts](c10d::Backend& gloo) { return gloo.barrier(opts); };
  });
}

void ProcessGroupOpenReg::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  gloo_->monitoredBarrier(opts, waitAllRanks);  // a host-side protocol: Gloo's own
}

}  // namespace torch_openreg
