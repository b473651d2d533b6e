// api_memcpy.cpp — C entry points for copies and fills.
//
// Every copy is validated on the calling thread (kind against the real
// pointer types, ranges against device and pinned allocations) and then
// executed as work on a stream, through the kernel view of device memory.
// Calls that wait for the copy are refused inside stream work (they could
// wait for the very stream running them).
#include <cstring>
#include <stdexcept>
#include <string>

#include "chaos.h"
#include "errors.h"
#include "fault_injection.h"
#include "pointer_info.h"
#include "runtime.h"

using namespace openreg::runtime;

namespace {

const char* memcpyKindName(orMemcpyKind kind) {
  switch (kind) {
    case orMemcpyHostToHost:
      return "orMemcpyHostToHost";
    case orMemcpyHostToDevice:
      return "orMemcpyHostToDevice";
    case orMemcpyDeviceToHost:
      return "orMemcpyDeviceToHost";
    case orMemcpyDeviceToDevice:
      return "orMemcpyDeviceToDevice";
    case orMemcpyDefault:
      return "orMemcpyDefault";
  }
  return "?";
}

const char* describe(const PointerInfo& info) {
  switch (info.type) {
    case orMemoryTypeDevice:
      return "device memory";
    case orMemoryTypeHost:
      return "pinned host memory";
    case orMemoryTypeUnregistered:
      return "pageable host memory";
  }
  return "?";
}

struct CopyPlan {
  void* destination;      // kernel-view address if on a device
  const void* source;     // kernel-view address if on a device
  size_t count;
  int primaryDevice = -1;   // device whose stream orders the copy (-1: host only)
  int secondaryDevice = -1; // the other device of a cross-device copy
  bool touchesPageable;     // a pageable host side forces completion before return
};

PointerInfo classifyOrThrow(const void* pointer, const char* role) {
  PointerInfo info = classifyPointer(pointer);
  check(!info.staleDeviceAddress, orErrorInvalidDevicePointer, role, " ", pointer, " is in device ",
        info.device, "'s memory but not in a live allocation (freed?)");
  return info;
}

void checkSide(const PointerInfo& info, bool wantDevice, const void* pointer, const char* role,
               orMemcpyKind kind) {
  check(info.isDevice() == wantDevice, orErrorInvalidMemcpyDirection, memcpyKindName(kind),
        " needs ", wantDevice ? "device" : "host", " memory as ", role, ", but ", pointer, " is ",
        describe(info));
}

void* toKernel(const PointerInfo& info, const void* pointer) {
  if (!info.isDevice()) return const_cast<void*>(pointer);
  return Runtime::instance().device(info.device).memory().toKernel(pointer);
}

CopyPlan planCopy(void* dst, const void* src, size_t count, orMemcpyKind kind) {
  check(kind >= orMemcpyHostToHost && kind <= orMemcpyDefault, orErrorInvalidMemcpyDirection,
        "memcpy kind ", static_cast<int>(kind), " is not an orMemcpyKind value (0..4)");
  CopyPlan plan{};
  if (count == 0) return plan;  // nothing to copy: no pointer is dereferenced
  check(dst != nullptr && src != nullptr, orErrorInvalidValue, "memcpy of ", count,
        " bytes with a NULL ", dst == nullptr ? "dst" : "src");
  const PointerInfo dstInfo = classifyOrThrow(dst, "dst");
  const PointerInfo srcInfo = classifyOrThrow(src, "src");
  if (kind != orMemcpyDefault) {
    checkSide(dstInfo, kind == orMemcpyHostToDevice || kind == orMemcpyDeviceToDevice, dst,
              "destination", kind);
    checkSide(srcInfo, kind == orMemcpyDeviceToHost || kind == orMemcpyDeviceToDevice, src,
              "source", kind);
  }
  if (dstInfo.isDevice()) requireDeviceRange(dst, count, "dst");
  if (dstInfo.type == orMemoryTypeHost) requirePinnedRange(dstInfo, dst, count, "dst");
  if (srcInfo.isDevice()) requireDeviceRange(src, count, "src");
  if (srcInfo.type == orMemoryTypeHost) requirePinnedRange(srcInfo, src, count, "src");

  plan.destination = toKernel(dstInfo, dst);
  plan.source = toKernel(srcInfo, src);
  plan.count = count;
  plan.primaryDevice = dstInfo.isDevice() ? dstInfo.device : srcInfo.device;
  if (dstInfo.isDevice() && srcInfo.isDevice() && srcInfo.device != dstInfo.device) {
    plan.secondaryDevice = srcInfo.device;
  }
  plan.touchesPageable = (!dstInfo.isDevice() && dstInfo.type == orMemoryTypeUnregistered) ||
                         (!srcInfo.isDevice() && srcInfo.type == orMemoryTypeUnregistered);
  return plan;
}

Stream::Work copyWork(const CopyPlan& plan) {
  return [destination = plan.destination, source = plan.source, count = plan.count] {
    if (count != 0) std::memmove(destination, source, count);
  };
}

// The copy as stream work; with OPENREG_FAULT_MEMCPY listing this call, work
// that fails the way a real copy failure does (nothing copied, the failure
// reported by the next synchronizing call as orErrorLaunchFailure).
Stream::Work copyWorkOrInjectedFault(const CopyPlan& plan) {
  if (auto call = injectedFault(FaultKind::Memcpy)) {
    return [message = injectedFaultMessage(FaultKind::Memcpy, *call)] {
      throw std::runtime_error(message + "; nothing was copied");
    };
  }
  return copyWork(plan);
}

// Enqueues on `stream`; waits (and reports failures) unless the copy may run
// asynchronously to the host.
void submit(Stream& stream, Stream::Work work, bool waitForCompletion) {
  const uint64_t sequence = stream.enqueue(std::move(work));
  if (!waitForCompletion) return;
  stream.waitFor(sequence);
  throwPendingFailure(stream);
}

void submitSynchronously(const CopyPlan& plan) {
  if (plan.count == 0) return;
  if (plan.primaryDevice >= 0) refuseInsideStreamWork("orMemcpy");
  Stream::Work work = copyWorkOrInjectedFault(plan);
  if (plan.primaryDevice < 0) {  // host to host: nothing to order against, runs here
    try {
      work();
    } catch (const std::runtime_error& failure) {
      fail(orErrorLaunchFailure, failure.what());
    }
    return;
  }
  Runtime& runtime = Runtime::instance();
  if (plan.secondaryDevice >= 0) {
    synchronizeOrThrow(*runtime.device(plan.secondaryDevice).defaultStream());
  }
  submit(*runtime.device(plan.primaryDevice).defaultStream(), std::move(work), true);
}

PointerInfo planFill(void* devPtr, size_t count) {
  check(count == 0 || devPtr != nullptr, orErrorInvalidValue, "memset of ", count,
        " bytes at NULL");
  if (count == 0) return PointerInfo{};
  return requireDeviceRange(devPtr, count, "memset destination");
}

Stream::Work fillWork(void* kernelPointer, int value, size_t count) {
  return [kernelPointer, value, count] { std::memset(kernelPointer, value, count); };
}

}  // namespace

extern "C" {

orError_t orMemcpy(void* dst, const void* src, size_t count, orMemcpyKind kind) {
  return runApi([&] { submitSynchronously(planCopy(dst, src, count, kind)); });
}

orError_t orMemcpyAsync(void* dst, const void* src, size_t count, orMemcpyKind kind,
                        orStream_t stream) {
  return runApi([&] {
    CopyPlan plan = planCopy(dst, src, count, kind);
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    if (plan.count == 0) return;
    // Pageable host memory makes the copy complete before returning.
    if (plan.touchesPageable) refuseInsideStreamWork("orMemcpyAsync with pageable host memory");
    // Chaos scheduling: an asynchronous copy into host memory completes as
    // late as allowed, when something waits for it.
    if (chaos::enabled() && kind == orMemcpyDeviceToHost && !plan.touchesPageable) {
      target->enqueue([raw = target.get()] { raw->holdUntilWaited(chaos::kHoldPointCap); });
    }
    submit(*target, copyWorkOrInjectedFault(plan), plan.touchesPageable);
  });
}

orError_t orMemset(void* devPtr, int value, size_t count) {
  return runApi([&] {
    PointerInfo info = planFill(devPtr, count);
    if (count == 0) return;
    refuseInsideStreamWork("orMemset");
    Device& device = Runtime::instance().device(info.device);
    submit(*device.defaultStream(), fillWork(device.memory().toKernel(devPtr), value, count), true);
  });
}

orError_t orMemsetAsync(void* devPtr, int value, size_t count, orStream_t stream) {
  return runApi([&] {
    PointerInfo info = planFill(devPtr, count);
    std::shared_ptr<Stream> target = Runtime::instance().resolveStream(stream);
    if (count == 0) return;
    void* kernelPointer = Runtime::instance().device(info.device).memory().toKernel(devPtr);
    submit(*target, fillWork(kernelPointer, value, count), false);
  });
}

}  // extern "C"
