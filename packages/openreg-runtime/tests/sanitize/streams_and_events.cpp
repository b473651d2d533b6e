// streams_and_events.cpp — the runtime's stream and event behaviour, driven
// from several host threads, for ThreadSanitizer (nox -s sanitize).
//
// Built together with the runtime's sources into one executable with
// -fsanitize=thread (Python is not instrumented, so the Python suite cannot
// run under TSan). Every scenario checks its own results, so the program also
// fails without a sanitizer; what TSan adds is that the hand-offs it relies on
// (worker and host, stream and stream, free and queued work) are real
// happens-before edges, not luck. Only the C API (openreg.h) is used.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "openreg.h"

namespace {

int failures = 0;

void expect(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
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

// Blocks a stream's worker until released: "the work is still queued" without sleeping.
class Hold {
 public:
  explicit Hold(orStream_t stream) {
    MUST(openreg::launchHostFunc(stream, [this] {
      std::unique_lock<std::mutex> lock(mutex_);
      running_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return released_; });
    }));
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return running_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool running_ = false;
  bool released_ = false;
};

// Plain (non-atomic) data written by stream work and read by the host after
// synchronizing: a race here means synchronization does not order them.
void fifoFromSeveralThreads() {
  orStream_t stream = nullptr;
  MUST(orStreamCreate(&stream));
  constexpr int kThreads = 4, kPerThread = 3000;  // beyond the 1024-deep queue
  std::vector<std::vector<int>> seen(kThreads);
  std::vector<std::thread> hosts;
  for (int t = 0; t < kThreads; ++t) {
    hosts.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        MUST(openreg::launchHostFunc(stream, [&seen, t, i] { seen[t].push_back(i); }));
      }
      MUST(orStreamSynchronize(stream));
    });
  }
  for (auto& host : hosts) host.join();
  for (int t = 0; t < kThreads; ++t) {
    bool inOrder = static_cast<int>(seen[t].size()) == kPerThread;
    for (int i = 0; inOrder && i < kPerThread; ++i) inOrder = seen[t][i] == i;
    expect(inOrder, "work of host thread " + std::to_string(t) + " ran in order");
  }
  MUST(orStreamDestroy(stream));
}

void eventsOrderStreams(int producerDevice, int consumerDevice) {
  orStream_t producer = nullptr, consumer = nullptr;
  MUST(orSetDevice(producerDevice));
  MUST(orStreamCreate(&producer));
  orEvent_t produced = nullptr;
  MUST(orEventCreateWithFlags(&produced, orEventDisableTiming));
  MUST(orSetDevice(consumerDevice));
  MUST(orStreamCreate(&consumer));
  for (int round = 0; round < 200; ++round) {
    auto value = std::make_shared<long>(0);
    auto observed = std::make_shared<long>(-1);
    MUST(openreg::launchHostFunc(producer, [value, round] { *value = round * 7 + 1; }));
    MUST(orEventRecord(produced, producer));
    MUST(orStreamWaitEvent(consumer, produced, 0));
    MUST(openreg::launchHostFunc(consumer, [value, observed] { *observed = *value; }));
    MUST(orStreamSynchronize(consumer));
    expect(*observed == round * 7 + 1, "the consumer saw the producer's write");
  }
  MUST(orStreamSynchronize(producer));
  MUST(orEventDestroy(produced));
  MUST(orStreamDestroy(producer));
  MUST(orStreamDestroy(consumer));
  MUST(orSetDevice(0));
}

void queriesWhileWorkRuns() {
  orStream_t stream = nullptr;
  MUST(orStreamCreate(&stream));
  orEvent_t start = nullptr, end = nullptr;
  MUST(orEventCreate(&start));
  MUST(orEventCreate(&end));
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    while (!stop.load()) {
      orError_t query = orStreamQuery(stream);
      if (query != orSuccess && query != orErrorNotReady) MUST(query);
      (void)orEventQuery(end);
      (void)orGetLastError();
    }
  });
  for (int round = 0; round < 100; ++round) {
    MUST(orEventRecord(start, stream));
    MUST(openreg::launchHostFunc(
        stream, [] { std::this_thread::sleep_for(std::chrono::microseconds(50)); }));
    MUST(orEventRecord(end, stream));
    MUST(orEventSynchronize(end));
    float ms = -1;
    MUST(orEventElapsedTime(&ms, start, end));
    expect(ms >= 0, "elapsed time is not negative");
  }
  stop = true;
  poller.join();
  MUST(orEventDestroy(start));
  MUST(orEventDestroy(end));
  MUST(orStreamDestroy(stream));
}

void failuresReportedOnce() {
  orStream_t stream = nullptr;
  MUST(orStreamCreate(&stream));
  std::atomic<int> reported{0};
  std::vector<std::thread> hosts;
  MUST(openreg::launchHostFunc(stream, [] { throw std::runtime_error("kernel failed"); }));
  for (int t = 0; t < 3; ++t) {
    hosts.emplace_back([&] {
      if (orStreamSynchronize(stream) == orErrorLaunchFailure) ++reported;
      (void)orGetLastError();
    });
  }
  for (auto& host : hosts) host.join();
  expect(reported.load() == 1, "a failure is reported exactly once");
  MUST(orStreamDestroy(stream));
}

void destroyWithQueuedWork() {
  auto ran = std::make_shared<std::atomic<int>>(0);
  for (int round = 0; round < 50; ++round) {
    orStream_t stream = nullptr;
    MUST(orStreamCreate(&stream));
    for (int i = 0; i < 20; ++i) MUST(openreg::launchHostFunc(stream, [ran] { ++*ran; }));
    MUST(orStreamDestroy(stream));
  }
  MUST(orDeviceSynchronize());
  expect(ran->load() == 50 * 20, "work of destroyed streams still ran");
}

void synchronizingInsideWorkIsRefused() {
  orStream_t stream = nullptr;
  MUST(orStreamCreate(&stream));
  orEvent_t event = nullptr;
  MUST(orEventCreate(&event));
  MUST(orEventRecord(event, stream));
  std::vector<orError_t> codes;
  MUST(openreg::launchHostFunc(stream, [&] {
    codes.push_back(orStreamSynchronize(stream));
    codes.push_back(orDeviceSynchronize());
    codes.push_back(orEventSynchronize(event));
    (void)orGetLastError();
  }));
  MUST(orStreamSynchronize(stream));
  expect(codes == std::vector<orError_t>(3, orErrorNotPermitted),
         "synchronizing inside work is refused");
  MUST(orEventDestroy(event));
  MUST(orStreamDestroy(stream));
}

// Frees racing with the queued work that uses the memory, from several host threads.
void freesWaitForQueuedWork() {
  constexpr size_t kSize = 1 << 16;
  std::vector<std::thread> hosts;
  for (int t = 0; t < 3; ++t) {
    hosts.emplace_back([t] {
      MUST(orSetDevice(t % 2));
      orStream_t stream = nullptr;
      MUST(orStreamCreate(&stream));
      for (int round = 0; round < 40; ++round) {
        void* pinned = nullptr;
        void* device = nullptr;
        MUST(orMallocHost(&pinned, kSize));
        std::memset(pinned, round, kSize);
        MUST(orMalloc(&device, kSize));
        Hold hold(stream);
        MUST(orMemcpyAsync(device, pinned, kSize, orMemcpyHostToDevice, stream));
        MUST(orMemsetAsync(device, 0x7f, kSize / 2, stream));
        MUST(orFree(device));       // queued work still writes it
        MUST(orFreeHost(pinned));   // and reads this
        void* reused = nullptr;
        MUST(orMalloc(&reused, kSize));
        MUST(orMemset(reused, 0, kSize));  // default stream: not held
        hold.release();
        MUST(orStreamSynchronize(stream));
        std::vector<unsigned char> out(kSize, 1);
        MUST(orMemcpy(out.data(), reused, kSize, orMemcpyDeviceToHost));
        bool zero = true;
        for (unsigned char byte : out) zero = zero && byte == 0;
        expect(zero, "queued work never writes a later allocation");
        MUST(orFree(reused));
      }
      MUST(orStreamDestroy(stream));
    });
  }
  for (auto& host : hosts) host.join();
  for (int device = 0; device < 2; ++device) {
    MUST(orSetDevice(device));
    MUST(orDeviceSynchronize());
    size_t free = 0, total = 0;
    MUST(orMemGetInfo(&free, &total));
    expect(free == total, "every freed byte came back on device " + std::to_string(device));
  }
  MUST(orSetDevice(0));
}

}  // namespace

int main() {
  const std::vector<std::pair<const char*, std::function<void()>>> scenarios = {
      {"fifo from several threads", fifoFromSeveralThreads},
      {"events order streams (one device)", [] { eventsOrderStreams(0, 0); }},
      {"events order streams (two devices)", [] { eventsOrderStreams(0, 1); }},
      {"queries while work runs", queriesWhileWorkRuns},
      {"failures reported once", failuresReportedOnce},
      {"destroy with queued work", destroyWithQueuedWork},
      {"synchronizing inside work is refused", synchronizingInsideWorkIsRefused},
      {"frees wait for queued work", freesWaitForQueuedWork},
  };
  for (const auto& [name, run] : scenarios) {
    run();
    std::printf("ok: %s\n", name);
  }
  if (failures != 0) {
    std::fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all scenarios passed\n");
  return 0;
}
