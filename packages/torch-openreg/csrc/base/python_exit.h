// python_exit.h — threads Python does not wait for, and the end of Python.
//
// Dropping the last C++ reference to a tensor that has a Python object lets go
// of that object, which takes the GIL. A thread that asks for the GIL once the
// interpreter has begun to finalize is ended by Python (pthread_exit), and that
// unwind through C++ destructors, which may not throw, aborts the process. Gloo
// threads and the process group's helpers finish work at any time — also while
// the interpreter shuts down — so what they let go of, and the callbacks they
// run (possibly Python code), go through here: until the binding's exit handler
// has run, `whilePythonRuns` runs its body; the exit handler waits for bodies in
// progress, and after it bodies are skipped and objects kept for ever (the
// process is ending).
#pragma once

#include <functional>
#include <memory>
#include <utility>

namespace torch_openreg {

// Runs `body` and returns true, or returns false at once if Python is exiting.
bool whilePythonRuns(const std::function<void()>& body);

// From the exit handler: later bodies are skipped; returns once none runs.
void closeForPythonExit();

// Keeps `object` alive until the process ends.
void keepForever(std::shared_ptr<void> object);

// Empties `object` (a tensor list, a work, a callable): what it held is let go of
// now, or kept for ever if Python is exiting.
template <typename T>
void letGo(T& object) {
  T held = std::move(object);
  object = T();
  const bool released = whilePythonRuns([&held] { T gone = std::move(held); });
  if (!released) keepForever(std::make_shared<T>(std::move(held)));
}

}  // namespace torch_openreg
