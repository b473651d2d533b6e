// fault_handler.cpp — SIGSEGV diagnostics for host access to device memory.
//
// Only async-signal-safe calls are used in the handler: write(2), sigaction(2)
// and a try-lock lookup of the allocation; text is formatted by hand.
#include "fault_handler.h"

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "runtime.h"

namespace openreg::runtime {
namespace {

struct sigaction previousAction;

class LineWriter {
 public:
  LineWriter& text(const char* s) {
    while (*s != '\0' && length_ < sizeof(buffer_) - 1) buffer_[length_++] = *s++;
    return *this;
  }
  LineWriter& decimal(uint64_t value) {
    char digits[24];
    int count = 0;
    do {
      digits[count++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
    while (count > 0 && length_ < sizeof(buffer_) - 1) buffer_[length_++] = digits[--count];
    return *this;
  }
  LineWriter& hex(uint64_t value) {
    text("0x");
    char digits[20];
    int count = 0;
    do {
      digits[count++] = "0123456789abcdef"[value & 0xf];
      value >>= 4;
    } while (value != 0);
    while (count > 0 && length_ < sizeof(buffer_) - 1) buffer_[length_++] = digits[--count];
    return *this;
  }
  void writeTo(int fileDescriptor) {
    buffer_[length_++] = '\n';
    size_t written = 0;
    while (written < length_) {
      ssize_t n = write(fileDescriptor, buffer_ + written, length_ - written);
      if (n <= 0) return;
      written += static_cast<size_t>(n);
    }
  }

 private:
  char buffer_[512];
  size_t length_ = 0;
};

void describeDeviceAccess(const void* address, Device& device) {
  LineWriter line;
  line.text("openreg: host code accessed device memory at ")
      .hex(reinterpret_cast<uintptr_t>(address))
      .text(" (device ")
      .decimal(static_cast<uint64_t>(device.index()));
  if (auto allocation = device.memory().tryFind(address)) {
    line.text(", inside a ").decimal(allocation->size);
    if (allocation->exporterPid != 0) {
      line.text("-byte import from process ")
          .decimal(static_cast<uint64_t>(allocation->exporterPid))
          .text(" at ");
    } else {
      line.text("-byte allocation at ");
    }
    line.hex(allocation->base)
        .text(" + ")
        .decimal(reinterpret_cast<uintptr_t>(address) - allocation->base);
  } else {
    line.text(", not inside a live allocation");
  }
  line.text(
      "): device memory is not host-accessible; copy it to the host first "
      "(orMemcpy, or tensor.cpu() in PyTorch)");
  line.writeTo(STDERR_FILENO);
}

bool previousIsFunction() {
  if (previousAction.sa_flags & SA_SIGINFO) return previousAction.sa_sigaction != nullptr;
  return previousAction.sa_handler != SIG_DFL && previousAction.sa_handler != SIG_IGN;
}

void callPrevious(int signalNumber, siginfo_t* info, void* context) {
  if (previousAction.sa_flags & SA_SIGINFO) {
    previousAction.sa_sigaction(signalNumber, info, context);
  } else {
    previousAction.sa_handler(signalNumber);
  }
}

void reinstateDefault() {
  struct sigaction defaultAction;
  std::memset(&defaultAction, 0, sizeof(defaultAction));
  defaultAction.sa_handler = SIG_DFL;
  sigaction(SIGSEGV, &defaultAction, nullptr);
}

// A fault that is not ours: the previous handler, or the default action (the
// faulting access repeats once we return, and kills the process).
void forwardFault(int signalNumber, siginfo_t* info, void* context) {
  if (previousIsFunction()) {
    callPrevious(signalNumber, info, context);
  } else if (previousAction.sa_handler == SIG_DFL) {
    reinstateDefault();
  }
}

// A SIGSEGV sent with kill() or raise() rather than raised by a faulting access.
//
// Sent by this very thread with raise() (SI_TKILL from our own pid), it is
// usually a handler installed after ours passing a fault on: Python's
// faulthandler, enabled after the first device use, restores our handler and
// raises the signal again. Such a signal carries no fault address, but
// returning lets the faulting access run again, which brings the fault, with
// its address, to this handler. The price: a deliberate raise(SIGSEGV) in a
// process whose previous disposition is the default one is ignored once (it
// cannot be told apart). Any other sent signal gets the previous disposition.
void handleSentSignal(int signalNumber, siginfo_t* info, void* context) {
  const bool raisedHere = info != nullptr && info->si_code == SI_TKILL && info->si_pid == getpid();
  if (previousIsFunction()) {
    callPrevious(signalNumber, info, context);
  } else if (previousAction.sa_handler == SIG_DFL && !raisedHere) {
    reinstateDefault();
    raise(SIGSEGV);  // not blocked (SA_NODEFER): the default action runs now
  }
}

void onSegmentationFault(int signalNumber, siginfo_t* info, void* context) {
  if (info == nullptr || info->si_code <= 0) {
    handleSentSignal(signalNumber, info, context);
    return;
  }
  Device* device = Runtime::instance().deviceContaining(info->si_addr);
  if (device == nullptr) {
    forwardFault(signalNumber, info, context);
    return;
  }
  describeDeviceAccess(info->si_addr, *device);
  // Re-raise: with the previous disposition back in place, returning makes
  // the instruction fault again, so the crash (and any earlier handler) runs.
  sigaction(SIGSEGV, &previousAction, nullptr);
}

}  // namespace

void installFaultHandler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = &onSegmentationFault;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previousAction);
}

}  // namespace openreg::runtime
