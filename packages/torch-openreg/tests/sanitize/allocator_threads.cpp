// allocator_threads.cpp — the binding's caching allocator driven from several
// host threads and stream workers, for ThreadSanitizer (nox -s sanitize-drivers).
//
// Python cannot run under TSan uninstrumented, so this program is built from
// the parts of torch_openreg._C that need no Python — base/, the block pool
// (memory/), the c10 device allocator and the streams (integration/), the
// kernel allocator (engine/kernel_allocator) — with the runtime's sources,
// libc10 and libtorch_cpu. Stream work that plays a kernel sets up what the
// launch path sets up around every kernel (KernelScope in
// engine/kernel_launch.cpp, which needs Python and is not built here): the
// worker runs kernel work of its stream, its current stream is that stream,
// and CPU allocations come from the device.
//
// Every block carries a byte pattern written by stream work of its owner and
// checked by later stream work of the owner: a block handed out while queued
// work still uses it fails the program with or without a sanitizer. What TSan
// adds is that every hand-off of a block — host to worker, worker to host,
// stream to stream through record_stream, kernel to host — is a real
// happens-before edge, not luck.
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/address_ranges.h"
#include "base/debug_modes.h"
#include "base/device.h"
#include "base/gil.h"
#include "base/kernel_thread.h"
#include "engine/kernel_allocator.h"
#include "integration/device_allocator.h"
#include "integration/stream.h"
#include "memory/block_pool.h"
#include "openreg.h"

namespace torch_openreg {
// base/gil.cpp needs Python.h and libpython; this process has no interpreter,
// so there is never a GIL to release (gil.cpp also releases nothing when
// Python is not initialized).
GilReleasedIfHeld::GilReleasedIfHeld() = default;
GilReleasedIfHeld::~GilReleasedIfHeld() = default;
}  // namespace torch_openreg

namespace {

using torch_openreg::deviceAllocator;

constexpr int kDevices = 2;
constexpr const char* kDeviceMemory = "1GiB";

std::atomic<int> failures{0};

void expect(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    failures.fetch_add(1);
  }
}

void must(orError_t status, const char* call) {
  if (status != orSuccess) {
    std::fprintf(stderr, "%s failed: %s: %s\n", call, orGetErrorName(status),
                 orGetLastErrorMessage());
    std::exit(1);
  }
}
#define MUST(call) must((call), #call)

// The pattern of one owner's round: never 0 (fresh memory) or 0xFF (poison).
unsigned char patternOf(int owner, int round) {
  return static_cast<unsigned char>(1 + (owner * 37 + round) % 250);
}

// Every byte is `pattern`: the first is, and each equals the next (one memcmp,
// which the sanitizers check as one range instead of byte by byte).
bool holds(const void* kernelView, size_t bytes, unsigned char pattern) {
  const auto* data = static_cast<const unsigned char*>(kernelView);
  return bytes == 0 || (data[0] == pattern && std::memcmp(data, data + 1, bytes - 1) == 0);
}

// Plain work on a stream's worker (a copy, a fill): no kernel state.
void enqueue(orStream_t stream, std::function<void()> work) {
  MUST(openreg::launchHostFunc(stream, std::move(work)));
}

// Work that plays a kernel of `stream` (see the file comment).
void enqueueKernel(const c10::Stream& stream, std::function<void()> body) {
  enqueue(torch_openreg::nativeHandle(stream), [stream, body = std::move(body)] {
    torch_openreg::KernelAllocationScope allocations(stream.device_index());
    const c10::Stream previous = torch_openreg::exchangeStream(stream);
    {
      torch_openreg::KernelThreadScope kernel(torch_openreg::nativeHandle(stream));
      body();
    }
    torch_openreg::exchangeStream(previous);
  });
}

// Writes `pattern` over the block on `stream`, then checks it there later:
// the block must still be the owner's when the check runs.
void writeThenCheck(orStream_t stream, const c10::DataPtr& block, size_t bytes,
                    unsigned char pattern, std::atomic<int>* bad) {
  void* view = torch_openreg::toKernelView(block.get(), block.device().index());
  enqueue(stream, [view, bytes, pattern] { std::memset(view, pattern, bytes); });
  enqueue(stream, [view, bytes, pattern, bad] {
    if (!holds(view, bytes, pattern)) bad->fetch_add(1);
  });
}

// Blocks a stream's worker until released: "still queued" without sleeping.
class Hold {
 public:
  explicit Hold(orStream_t stream) : state_(std::make_shared<State>()) {
    enqueue(stream, [state = state_] {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->running = true;
      state->changed.notify_all();
      state->changed.wait(lock, [&] { return state->released; });
    });
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait(lock, [this] { return state_->running; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->released = true;
    state_->changed.notify_all();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool running = false;
    bool released = false;
  };
  std::shared_ptr<State> state_;
};

void runThreads(int count, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) threads.emplace_back(body, t);
  for (auto& thread : threads) thread.join();
}

void synchronizeAll() {
  for (int device = 0; device < kDevices; ++device) {
    MUST(orSetDevice(device));
    MUST(orDeviceSynchronize());
  }
  MUST(orSetDevice(0));
}

const size_t kSizes[] = {512, 4096, 100000, 1 << 20, (1 << 20) + 512, 3 << 20, 12 << 20};

// Host threads allocate, queue work on the memory and free it at once (the
// next allocation for the stream may reuse it: its work runs later), on pool
// streams and the default streams of both devices.
void hostChurn() {
  constexpr int kThreads = 4, kRounds = 150;
  std::atomic<int> bad{0};
  runThreads(kThreads, [&](int t) {
    const auto device = static_cast<c10::DeviceIndex>(t % kDevices);
    torch_openreg::DeviceScope scope(device);
    const c10::Stream stream = t < kDevices ? torch_openreg::defaultStream(device)
                                            : torch_openreg::streamFromPool(device, 0);
    const orStream_t handle = torch_openreg::nativeHandle(stream);
    for (int round = 0; round < kRounds; ++round) {
      const size_t bytes = kSizes[(t + round) % std::size(kSizes)];
      c10::DataPtr block = deviceAllocator().allocateOn(device, bytes, handle);
      writeThenCheck(handle, block, bytes, patternOf(t, round), &bad);
    }  // each block freed while its work is still queued
  });
  synchronizeAll();
  expect(bad.load() == 0, "host churn: a block was reused while its stream still used it");
}

// CUDA's record_stream contract: memory used on another stream returns to the
// pool only once the work queued there by the time of the free has run, even
// when record_stream was called before that work was queued.
void recordStreamProtectsOtherStreams() {
  std::atomic<int> bad{0};
  runThreads(kDevices, [&](int t) {
    const auto device = static_cast<c10::DeviceIndex>(t);
    torch_openreg::DeviceScope scope(device);
    const c10::Stream owner = torch_openreg::streamFromPool(device, 0);
    const c10::Stream user = torch_openreg::streamFromPool(device, -1);
    const orStream_t ownerHandle = torch_openreg::nativeHandle(owner);
    const orStream_t userHandle = torch_openreg::nativeHandle(user);
    orEvent_t written = nullptr;
    MUST(orEventCreateWithFlags(&written, orEventDisableTiming));
    for (int round = 0; round < 40; ++round) {
      const size_t bytes = kSizes[round % std::size(kSizes)];
      const unsigned char pattern = patternOf(t, round);
      c10::DataPtr block = deviceAllocator().allocateOn(device, bytes, ownerHandle);
      void* view = torch_openreg::toKernelView(block.get(), device);
      enqueue(ownerHandle, [view, bytes, pattern] { std::memset(view, pattern, bytes); });
      MUST(orEventRecord(written, ownerHandle));
      MUST(orStreamWaitEvent(userHandle, written, 0));
      // Recorded first, used afterwards (the prefetcher's order).
      deviceAllocator().recordStream(block, user);
      Hold hold(userHandle);
      enqueue(userHandle, [view, bytes, pattern, &bad] {
        if (!holds(view, bytes, pattern)) bad.fetch_add(1);
      });
      block.clear();
      // The owner's stream allocates the same sizes again and overwrites them,
      // while the user's work is still held.
      for (int again = 0; again < 3; ++again) {
        c10::DataPtr next = deviceAllocator().allocateOn(device, bytes, ownerHandle);
        void* nextView = torch_openreg::toKernelView(next.get(), device);
        enqueue(ownerHandle, [nextView, bytes] { std::memset(nextView, 0, bytes); });
      }
      MUST(orStreamSynchronize(ownerHandle));
      hold.release();
      MUST(orStreamSynchronize(userHandle));
    }
    MUST(orEventDestroy(written));
  });
  expect(bad.load() == 0, "record_stream: the owner's stream reused memory another stream used");
}

// A kernel is queued work itself: a block the host frees after queueing the
// kernel and more work behind it is still that work's, however early the
// kernel runs and asks for memory of the same size.
void kernelsSkipMemoryOfWorkQueuedBehind() {
  std::atomic<int> bad{0};
  for (int round = 0; round < 20; ++round) {
    const c10::Stream stream = torch_openreg::streamFromPool(0, 0);
    const orStream_t handle = torch_openreg::nativeHandle(stream);
    constexpr size_t kBytes = 1 << 16;
    const unsigned char kernelPattern = patternOf(1, round), hostPattern = patternOf(2, round);
    auto result = std::make_shared<c10::DataPtr>();
    Hold hold(handle);
    enqueueKernel(stream, [result, kernelPattern] {
      c10::DataPtr memory = c10::GetCPUAllocator()->allocate(kBytes);
      std::memset(memory.get(), kernelPattern, kBytes);
      *result = torch_openreg::relabelAsDevice(memory);
    });
    {
      c10::DataPtr block = deviceAllocator().allocateOn(0, kBytes, handle);
      writeThenCheck(handle, block, kBytes, hostPattern, &bad);
    }  // freed before the kernel runs, with its own work queued behind the kernel
    hold.release();
    MUST(orStreamSynchronize(handle));
    void* view = torch_openreg::toKernelView(result->get(), 0);
    enqueue(handle, [view, kernelPattern, &bad] {
      if (!holds(view, kBytes, kernelPattern)) bad.fetch_add(1);
    });
    MUST(orStreamSynchronize(handle));
    result->clear();
  }
  expect(bad.load() == 0, "a kernel got memory that work queued behind it still used");
}

// Kernels allocate (results, temporaries) through c10's CPU allocator, which
// the kernel allocator serves from the device; some results go to the host,
// which frees them later, while host threads allocate for the same streams.
void kernelAllocations() {
  constexpr int kThreads = 3, kKernels = 120;
  std::atomic<int> bad{0};
  struct Result {
    c10::DataPtr block;
    size_t bytes;
    unsigned char pattern;
    c10::Stream stream;
  };
  std::mutex resultsMutex;
  std::vector<Result> results;
  std::atomic<int> producersLeft{kThreads};
  auto kernel = [&](const c10::Stream& stream, int owner, int round) {
    const size_t bytes = kSizes[(owner + round) % 5];
    const unsigned char pattern = patternOf(owner, round);
    c10::Allocator* cpu = c10::GetCPUAllocator();
    c10::DataPtr result = cpu->allocate(bytes);
    std::memset(result.get(), pattern, bytes);
    {
      c10::DataPtr temporary = cpu->allocate(bytes / 2 + 1);
      std::memset(temporary.get(), 0x5A, bytes / 2 + 1);
      if (!holds(result.get(), bytes, pattern)) bad.fetch_add(1);
    }  // freed inside the kernel: reusable after this kernel, in stream order
    if (round % 2 == 0) return;  // the result dies with the kernel too
    c10::DataPtr onDevice = torch_openreg::relabelAsDevice(result);
    std::lock_guard<std::mutex> lock(resultsMutex);
    results.push_back(Result{std::move(onDevice), bytes, pattern, stream});
  };
  std::thread consumer([&] {
    // The host frees kernels' results after checking them on their stream.
    while (true) {
      std::vector<Result> taken;
      {
        std::lock_guard<std::mutex> lock(resultsMutex);
        taken.swap(results);
      }
      for (Result& result : taken) {
        const orStream_t handle = torch_openreg::nativeHandle(result.stream);
        void* view = torch_openreg::toKernelView(result.block.get(), result.stream.device_index());
        enqueue(handle, [view, bytes = result.bytes, pattern = result.pattern, &bad] {
          if (!holds(view, bytes, pattern)) bad.fetch_add(1);
        });
        result.block.clear();
      }
      if (taken.empty() && producersLeft.load() == 0) {
        std::lock_guard<std::mutex> lock(resultsMutex);
        if (results.empty()) break;
      }
      std::this_thread::yield();
    }
  });
  runThreads(kThreads, [&](int t) {
    const auto device = static_cast<c10::DeviceIndex>(t % kDevices);
    torch_openreg::DeviceScope scope(device);
    const c10::Stream stream = torch_openreg::streamFromPool(device, 0);
    const orStream_t handle = torch_openreg::nativeHandle(stream);
    for (int round = 0; round < kKernels; ++round) {
      enqueueKernel(stream, [&kernel, stream, t, round] { kernel(stream, t, round); });
      // The host allocates for the same stream between kernels.
      const size_t bytes = kSizes[round % 4];
      c10::DataPtr block = deviceAllocator().allocateOn(device, bytes, handle);
      writeThenCheck(handle, block, bytes, patternOf(t + kThreads, round), &bad);
    }
    MUST(orStreamSynchronize(handle));  // every result of this thread's kernels is listed
    producersLeft.fetch_sub(1);
  });
  consumer.join();
  synchronizeAll();
  expect(bad.load() == 0, "kernel allocations: a block changed under its owner");
}

// empty_cache, statistics, snapshots and private pools (MemPool) from other
// threads while host threads and kernels allocate.
void cacheControlWhileAllocating() {
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread control([&] {
    while (!stop.load()) {
      deviceAllocator().emptyCache();
      for (c10::DeviceIndex device = 0; device < kDevices; ++device) {
        const auto stats = deviceAllocator().getDeviceStats(device);
        expect(stats.allocated_bytes[0].current <= stats.reserved_bytes[0].current,
               "statistics: more allocated than reserved");
        size_t listed = 0;
        for (const auto& segment : torch_openreg::blockPool(device).segments()) {
          listed += segment.size;
        }
        (void)listed;
      }
    }
  });
  std::thread pools([&] {
    torch_openreg::DeviceScope scope(1);
    const c10::Stream stream = torch_openreg::streamFromPool(1, 0);
    const orStream_t handle = torch_openreg::nativeHandle(stream);
    for (int round = 0; round < 40; ++round) {
      torch_openreg::MemPool pool(torch_openreg::PoolOptions{});
      pool.beginAllocating(1);
      c10::DataPtr block = deviceAllocator().allocateOn(1, 1 << 16, handle);
      pool.endAllocating(1);
      writeThenCheck(handle, block, 1 << 16, patternOf(9, round), &bad);
    }  // the pool goes while its block's work may still be queued
  });
  runThreads(2, [&](int t) {
    const auto device = static_cast<c10::DeviceIndex>(t);
    torch_openreg::DeviceScope scope(device);
    const c10::Stream stream = torch_openreg::streamFromPool(device, 0);
    const orStream_t handle = torch_openreg::nativeHandle(stream);
    for (int round = 0; round < 150; ++round) {
      const size_t bytes = kSizes[round % std::size(kSizes)];
      c10::DataPtr block = deviceAllocator().allocateOn(device, bytes, handle);
      writeThenCheck(handle, block, bytes, patternOf(t, round), &bad);
      if (round % 10 == 0) {
        enqueueKernel(stream, [&bad, t, round] {
          c10::DataPtr scratch = c10::GetCPUAllocator()->allocate(4096);
          std::memset(scratch.get(), patternOf(t, round), 4096);
          if (!holds(scratch.get(), 4096, patternOf(t, round))) bad.fetch_add(1);
        });
      }
    }
  });
  pools.join();
  stop = true;
  control.join();
  synchronizeAll();
  expect(bad.load() == 0, "cache control: a block changed under its owner");
}

// Out of memory from host threads and kernels at once: the host retries after
// waiting for the device, a kernel after returning what no queued work uses;
// whoever still fails gets c10::OutOfMemoryError, and nothing is lost.
constexpr double kMemoryFraction = 1.0 / 16;  // 64 MiB of 1 GiB
constexpr size_t kOverLimit = 80 << 20;

void outOfMemory() {
  for (c10::DeviceIndex device = 0; device < kDevices; ++device) {
    deviceAllocator().setMemoryFraction(device, kMemoryFraction);
  }
  std::atomic<int> bad{0};
  runThreads(4, [&](int t) {
    const auto device = static_cast<c10::DeviceIndex>(t % kDevices);
    torch_openreg::DeviceScope scope(device);
    const c10::Stream stream = torch_openreg::streamFromPool(device, 0);
    const orStream_t handle = torch_openreg::nativeHandle(stream);
    std::vector<c10::DataPtr> kept;
    for (int round = 0; round < 60; ++round) {
      try {
        kept.push_back(deviceAllocator().allocateOn(device, 12 << 20, handle));
        writeThenCheck(handle, kept.back(), 12 << 20, patternOf(t, round), &bad);
      } catch (const c10::OutOfMemoryError&) {
        kept.clear();
      }
      if (kept.size() > 2) kept.erase(kept.begin());
      enqueueKernel(stream, [] {
        try {
          c10::DataPtr large = c10::GetCPUAllocator()->allocate(24 << 20);
          std::memset(large.get(), 1, 4096);
        } catch (const c10::OutOfMemoryError&) {
          // Expected now and then: the other threads hold the rest.
        }
      });
    }
  });
  // Beyond the limit on its own: refused on the host and inside a kernel alike.
  bool hostRefused = false;
  try {
    deviceAllocator().allocateOn(0, kOverLimit);
  } catch (const c10::OutOfMemoryError&) {
    hostRefused = true;
  }
  auto kernelRefused = std::make_shared<std::atomic<bool>>(false);
  enqueueKernel(torch_openreg::defaultStream(0), [kernelRefused] {
    try {
      c10::GetCPUAllocator()->allocate(kOverLimit);
    } catch (const c10::OutOfMemoryError&) {
      kernelRefused->store(true);
    }
  });
  synchronizeAll();
  for (c10::DeviceIndex device = 0; device < kDevices; ++device) {
    deviceAllocator().setMemoryFraction(device, 1.0);
  }
  expect(bad.load() == 0, "out of memory: a block changed under its owner");
  expect(hostRefused, "out of memory: the host got memory beyond the limit");
  expect(kernelRefused->load(), "out of memory: a kernel got memory beyond the limit");
}

// At the end every block is back and every segment can be returned.
void everythingReturns() {
  synchronizeAll();
  deviceAllocator().emptyCache();
  for (c10::DeviceIndex device = 0; device < kDevices; ++device) {
    const auto stats = deviceAllocator().getDeviceStats(device);
    expect(stats.allocated_bytes[0].current == 0,
           "device " + std::to_string(device) + ": allocated bytes left at the end");
    expect(stats.reserved_bytes[0].current == 0,
           "device " + std::to_string(device) + ": segments left after empty_cache");
    MUST(orSetDevice(device));
    size_t free = 0, total = 0;
    MUST(orMemGetInfo(&free, &total));
    expect(free == total, "device " + std::to_string(device) + ": runtime memory not returned");
  }
  MUST(orSetDevice(0));
}

}  // namespace

// --allocator-fault=NAME breaks one rule of the allocator on purpose (as
// torch_openreg._C._set_allocator_fault does for the Python tests), to show
// that the scenarios catch it: the program must then fail.
bool injectFault(int argc, char** argv) {
  const std::string option = "--allocator-fault=";
  if (argc == 1) return true;
  const std::string argument = argc == 2 ? argv[1] : "";
  const std::string name = argument.rfind(option, 0) == 0 ? argument.substr(option.size()) : "";
  if (name == "ignore-recorded-streams") {
    torch_openreg::setAllocatorFault(torch_openreg::AllocatorFault::IgnoreRecordedStreams);
  } else if (name == "kernels-ignore-queued-work") {
    torch_openreg::setAllocatorFault(torch_openreg::AllocatorFault::KernelsIgnoreQueuedWork);
  } else {
    std::fprintf(stderr,
                 "usage: %s [--allocator-fault=ignore-recorded-streams|"
                 "kernels-ignore-queued-work]\n",
                 argv[0]);
    return false;
  }
  return true;
}

int main(int argc, char** argv) {
  if (!injectFault(argc, argv)) return 2;
  // Before the runtime's first call, which reads the environment once.
  setenv("OPENREG_DEVICE_COUNT", std::to_string(kDevices).c_str(), 1);
  setenv("OPENREG_DEVICE_MEMORY", kDeviceMemory, 1);
  torch_openreg::installKernelAllocator();
  const std::vector<std::pair<const char*, std::function<void()>>> scenarios = {
      {"host churn", hostChurn},
      {"record_stream protects other streams", recordStreamProtectsOtherStreams},
      {"kernels skip memory of work queued behind them", kernelsSkipMemoryOfWorkQueuedBehind},
      {"kernel allocations", kernelAllocations},
      {"poisoned kernel allocations",
       [] {
         torch_openreg::setDebugModes(torch_openreg::kDebugPoison);
         kernelAllocations();
         torch_openreg::setDebugModes(0);
       }},
      {"cache control while allocating", cacheControlWhileAllocating},
      {"out of memory", outOfMemory},
      {"everything returns", everythingReturns},
  };
  for (const auto& [name, run] : scenarios) {
    try {
      run();
      // Each scenario starts with an empty cache: kernels cannot wait for other
      // streams' queued work, so segments cached for streams of an earlier
      // scenario would crowd a small device (see releaseCacheFromKernel).
      synchronizeAll();
      deviceAllocator().emptyCache();
    } catch (const c10::Error& error) {
      std::fprintf(stderr, "FAILED: %s raised: %s\n", name, error.what_without_backtrace());
      return 1;
    }
    std::printf("ok: %s\n", name);
  }
  if (failures.load() != 0) {
    std::fprintf(stderr, "%d check(s) failed\n", failures.load());
    return 1;
  }
  std::printf("all scenarios passed\n");
  return 0;
}
