// device_registry.h — the cross-process registry behind openreg-smi.
//
// Every process that activates a device publishes a small record file in a
// per-user directory (default /dev/shm/openreg-<uid>, mode 0700; files 0600):
// its pid, start time and name, and per device its capacity, bytes in use and
// busy-time counters. Readers (orGetProcessUsage) list the directory and map
// each file read-only. One file per process rather than a shared slot table:
// no claiming protocol, no limit on processes, and a crashed process leaves
// one file that any reader recognises as stale (its pid is gone, or belongs
// to a process with another start time) and unlinks.
//
// The hot paths only store into this process's own mapping: a relaxed store
// of bytes in use after an allocation or free, and when a stream goes from
// idle to busy or back a short critical section on a per-device mutex (a
// clock read, a seqlock write); work queued back to back costs nothing more. Only the counters are
// stored: no addresses, no command lines, and only the owner can read them.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "openreg.h"

namespace openreg::runtime {

// Busy time is averaged over this window (nvidia-smi's sample period is
// between 1/6 s and 1 s); see utilizationPercent() for how it is sampled.
constexpr uint64_t kUtilizationWindowNs = uint64_t{OPENREG_UTILIZATION_WINDOW_MS} * 1000000;
constexpr int kBusySamples = 16;

// Shared-memory layout of one device's counters (version kRegistryVersion).
struct RegistryDeviceRecord {
  std::atomic<uint32_t> sequence;  // seqlock over the busy fields: odd while written
  std::atomic<uint32_t> active;    // the process activated the device
  std::atomic<uint64_t> capacity;
  std::atomic<uint64_t> bytesInUse;
  std::atomic<uint64_t> busyTotalNs;  // busy time of finished busy periods
  std::atomic<uint64_t> busySinceNs;  // start of the running busy period, 0 when idle
  std::atomic<uint32_t> sampleHead;   // index of the newest sample
  std::atomic<uint32_t> padding;
  // (CLOCK_MONOTONIC time, busy time up to then), written at most every
  // window/8 at the start or end of work: a ring spanning at least 2 windows.
  std::atomic<uint64_t> sampleTimeNs[kBusySamples];
  std::atomic<uint64_t> sampleBusyNs[kBusySamples];
};

struct RegistryFile {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  uint64_t startTime;         // /proc/<pid>/stat field 22 (clock ticks after boot)
  uint64_t pidNamespace;      // inode of /proc/self/ns/pid: pids mean nothing elsewhere
  char name[32];              // /proc/self/comm
  RegistryDeviceRecord devices[OPENREG_MAX_DEVICES];
};

constexpr uint64_t kRegistryMagic = 0x4f50454e52454731ULL;  // "OPENREG1"
constexpr uint32_t kRegistryVersion = 1;

// The monotonic clock shared by all processes, in nanoseconds.
uint64_t monotonicNanoseconds();

// Busy-time bookkeeping of one device in this process. A stream's worker
// calls workStarted() when it starts work after being idle and workFinished()
// when it has run everything queued; the device counts as busy while any of
// its streams is (like nvidia-smi's "one or more
// kernels was executing"), so concurrent streams never exceed 100%.
//
// The record is shared memory that any process of this user can write, by
// mistake or on purpose. This object therefore only ever stores into it, from
// its own copy of every field, and never reads it back: a value read back
// (the sample index once was) could steer this process outside the record,
// and each publication also repairs whatever it rewrites.
class DeviceActivity {
 public:
  void workStarted();
  void workFinished();
  // Publishes to `record` from now on (nullptr: the registry is unavailable);
  // `capacity` is the device's, republished with the other counters.
  void attach(RegistryDeviceRecord* record, uint64_t capacity);

 private:
  void publishLocked(uint64_t now);

  std::mutex mutex_;
  int running_ = 0;
  uint64_t busySinceNs_ = 0;
  uint64_t busyTotalNs_ = 0;
  uint64_t lastSampleNs_ = 0;
  uint64_t capacity_ = 0;
  uint32_t sequence_ = 0;    // the seqlock's value between writes (always even)
  uint32_t sampleHead_ = 0;  // index of the newest sample, always < kBusySamples
  std::array<uint64_t, kBusySamples> sampleTimeNs_{};
  std::array<uint64_t, kBusySamples> sampleBusyNs_{};
  RegistryDeviceRecord* record_ = nullptr;
};

DeviceActivity& deviceActivity(int device);

// Called when this process activates `device`: creates the process's record
// file on first use and returns the device's bytes-in-use counter to keep
// current, or nullptr when the registry is unavailable (the runtime works
// without it; orGetProcessUsage then reports why).
std::atomic<uint64_t>* registerDevice(int device, size_t capacity);

struct ProcessUsage {
  int pid;
  int device;
  uint64_t startTime;
  std::string name;
  uint64_t bytesInUse;
  uint64_t capacity;
  unsigned utilization;  // percent of the last window with work running
};

// Every live registered (process, device) pair of this user, by device then
// pid; prunes the files of processes that no longer exist. Throws ApiError
// (orErrorNotPermitted) when the directory is not safe to use.
std::vector<ProcessUsage> listProcessUsage();

}  // namespace openreg::runtime
