// fault_handler.h — turns a host access to device memory into a clear message.
//
// The SIGSEGV handler checks whether the faulting address lies in a device's
// memory. If so it writes one line to stderr (address, device, allocation,
// hint), restores the previous disposition and returns, so the access faults
// again and the process still dies by SIGSEGV (or the previous handler, e.g.
// Python's faulthandler, runs). Other addresses go straight to the previous
// handler. A handler installed later (Python's faulthandler enabled after the
// first device use) runs first and passes the signal on with raise(); the
// runtime's handler then lets the access fault again to learn its address, so
// the diagnostic is printed in either order.
#pragma once

namespace openreg::runtime {

void installFaultHandler();

}  // namespace openreg::runtime
