// operator_errors.h — errors of queued kernels name their operator.
//
// An error inside asynchronous work surfaces at the next synchronization (or,
// if nothing synchronizes, at exit), far from the call that queued it, and the
// kernel's own message ("index out of range in self") does not say which
// operator failed. The sites that queue operators run the work's body through
// runNamingOperator(), which adds "in <operator>" to the error's context. The
// error keeps its type, so with OPENREG_LAUNCH_BLOCKING=1 the caller still gets
// the IndexError the CPU kernel raised.
#pragma once

#include <c10/util/Exception.h>

#include <string>

namespace torch_openreg {

// Runs `body`; a c10::Error it raises leaves with "in <name()>" added. `name`
// is called only then, so the common path builds no string.
template <typename Name, typename Body>
void runNamingOperator(const Name& name, const Body& body) {
  try {
    body();
  } catch (c10::Error& error) {
    error.add_context("in " + std::string(name()));
    throw;
  }
}

}  // namespace torch_openreg
