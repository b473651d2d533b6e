// helper_threads.cpp — see helper_threads.h.
#include "distributed/helper_threads.h"

#include <thread>
#include <utility>

#include "base/python_exit.h"

namespace torch_openreg {

HelperThreads::HelperThreads() : state_(std::make_shared<State>()) {}

HelperThreads::~HelperThreads() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->ready.notify_all();
}

void HelperThreads::run(std::function<void()> task) {
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

void HelperThreads::loop(std::shared_ptr<State> state) {
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

}  // namespace torch_openreg
