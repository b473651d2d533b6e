// collective_issue.h — handing collectives to Gloo in stream order and in
// the order the host issued them, and completing their Works.
//
// The life of one collective on openreg tensors:
//   1. host (issue): take the next ticket and launch the "issue" work on the
//      caller's current stream through the engine's launch path, which checks
//      it for races and records it for the profiler from its LaunchSpec;
//   2. stream worker (issueInTurn): once the work before it has run and every
//      earlier ticket has been issued, hand the CPU aliases to Gloo (which only
//      enqueues the collective on its own threads) and return;
//   3. Gloo thread: run the collective on device memory, complete its future;
//      the Work completes from that callback (Gloo works without a future,
//      such as send/recv, are waited for by a helper thread);
//   4. OpenRegWork::wait(): the caller's current stream waits (work.h).
// Tickets exist because Gloo pairs the collectives of the ranks by the order
// they reach it, whatever streams the host issued them on. A failure reported
// by Gloo breaks the group: later collectives fail at once instead of each
// waiting for its own timeout.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "distributed/helper_threads.h"
#include "distributed/work.h"
#include "engine/launch_spec.h"

namespace torch_openreg {

// A Gloo call over CPU aliases, made on the stream worker when its turn comes.
using GlooCall = std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend& gloo)>;

class CollectiveIssuer : public std::enable_shared_from_this<CollectiveIssuer> {
 public:
  CollectiveIssuer(int rank, int size, c10d::Backend* gloo);

  // Raises if an earlier collective broke the group.
  void throwIfBroken();
  // Launches `work`'s collective (`call`) with the accesses of `spec`.
  void issue(const LaunchSpec& spec, const c10::intrusive_ptr<OpenRegWork>& work, GlooCall call);
  // The backend is going: collectives not yet handed to Gloo fail; returns
  // the Gloo works helpers still wait for (to abort them).
  std::vector<c10::intrusive_ptr<c10d::Work>> detachGloo();
  bool broken();
  int rank() const { return rank_; }
  std::string prefix() const;

 private:
  void issueInTurn(uint64_t ticket, const c10::intrusive_ptr<OpenRegWork>& work,
                   const GlooCall& call);
  c10::intrusive_ptr<c10d::Work> callGloo(const c10::intrusive_ptr<OpenRegWork>& work,
                                          const GlooCall& call, std::exception_ptr& refused);
  void watch(const c10::intrusive_ptr<OpenRegWork>& work,
             const c10::intrusive_ptr<c10d::Work>& glooWork);
  void waitOnHelper(const c10::intrusive_ptr<OpenRegWork>& work,
                    const c10::intrusive_ptr<c10d::Work>& glooWork);
  void completeFromGloo(const c10::intrusive_ptr<OpenRegWork>& work, std::exception_ptr failure,
                        int source = -1);
  void complete(const c10::intrusive_ptr<OpenRegWork>& work, std::exception_ptr failure,
                int source = -1);

  const int rank_;
  const int size_;

  std::mutex hostOrder_;     // host threads: a ticket and its launch go together
  uint64_t nextTicket_ = 0;  // guarded by hostOrder_

  std::mutex mutex_;  // guards what follows
  std::condition_variable turn_;
  uint64_t issued_ = 0;         // tickets already handed to Gloo
  c10d::Backend* gloo_;         // null once the backend is destroyed
  std::exception_ptr failure_;  // the first communication failure: the group is broken
  std::unordered_set<c10d::Work*> waitedOn_;  // Gloo works a helper waits for

  HelperThreads helpers_;
};

}  // namespace torch_openreg
