// python_exit.cpp — see python_exit.h.
#include "base/python_exit.h"

#include <condition_variable>
#include <mutex>
#include <vector>

#include "base/gil.h"

namespace torch_openreg {
namespace {

struct ExitGate {
  std::mutex mutex;
  std::condition_variable idle;
  int running = 0;     // bodies in progress
  bool closed = false;  // the exit handler has run
  std::vector<std::shared_ptr<void>> kept;
};

// Never destroyed: threads may use it while static objects are torn down.
ExitGate& gate() {
  static auto* instance = new ExitGate();
  return *instance;
}

}  // namespace

bool whilePythonRuns(const std::function<void()>& body) {
  ExitGate& exit = gate();
  {
    std::lock_guard<std::mutex> lock(exit.mutex);
    if (exit.closed) return false;
    ++exit.running;
  }
  struct Leave {
    ExitGate& exit;
    ~Leave() {
      std::lock_guard<std::mutex> lock(exit.mutex);
      if (--exit.running == 0) exit.idle.notify_all();
    }
  } leave{exit};
  body();
  return true;
}

void closeForPythonExit() {
  ExitGate& exit = gate();
  GilReleasedIfHeld released;  // a body in progress may be waiting for the GIL
  std::unique_lock<std::mutex> lock(exit.mutex);
  exit.closed = true;
  exit.idle.wait(lock, [&] { return exit.running == 0; });
}

void keepForever(std::shared_ptr<void> object) {
  ExitGate& exit = gate();
  std::lock_guard<std::mutex> lock(exit.mutex);
  exit.kept.push_back(std::move(object));
}

}  // namespace torch_openreg
