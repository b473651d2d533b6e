// gil.h — the host waits for the device without holding Python's GIL.
//
// Queued work may need the GIL to run: a Python host function, autograd hooks
// that the worker runs, operators defined in Python. A host thread that waits
// for that work while holding the GIL waits for work that waits for it, for
// ever. So every wait for queued work that Python can reach releases the GIL
// for its duration — only if this thread holds it: C++ callers, stream workers
// and threads of a finalizing interpreter have nothing to release.
#pragma once

namespace torch_openreg {

class GilReleasedIfHeld {
 public:
  GilReleasedIfHeld();
  ~GilReleasedIfHeld();
  GilReleasedIfHeld(const GilReleasedIfHeld&) = delete;
  GilReleasedIfHeld& operator=(const GilReleasedIfHeld&) = delete;

 private:
  void* saved_ = nullptr;  // the PyThreadState to restore, if the GIL was released
};

}  // namespace torch_openreg
