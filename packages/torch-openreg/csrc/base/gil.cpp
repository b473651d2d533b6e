// gil.cpp — see gil.h.
#include "base/gil.h"

#include <Python.h>

namespace torch_openreg {

GilReleasedIfHeld::GilReleasedIfHeld() {
  if (Py_IsInitialized() && PyGILState_Check()) saved_ = PyEval_SaveThread();
}

GilReleasedIfHeld::~GilReleasedIfHeld() {
  if (saved_ != nullptr) PyEval_RestoreThread(static_cast<PyThreadState*>(saved_));
}

}  // namespace torch_openreg
