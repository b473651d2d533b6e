// helper_threads.h — threads for what must not run on a stream worker.
//
// A collective's completion may run Python (future callbacks need the GIL,
// which a stream worker must never wait for), and a Gloo work without a
// future (send/recv) completes only inside its blocking wait(). Such tasks run
// here: every task gets a thread of its own while it runs — an idle one, or a
// new one — so one pending receive never delays the completion of another.
// Threads are detached and share the state with the pool, so a pool may go
// away on any thread, even one of its own.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace torch_openreg {

class HelperThreads {
 public:
  HelperThreads();
  ~HelperThreads();
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;

  void run(std::function<void()> task);

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::function<void()>> tasks;
    size_t idle = 0;
    bool stopping = false;
  };
  static void loop(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
};

}  // namespace torch_openreg
