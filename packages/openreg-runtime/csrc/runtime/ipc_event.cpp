// ipc_event.cpp — the shared event file, records that publish their completion,
// and waits on another process's records.
#include "ipc_event.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "environment.h"
#include "errors.h"
#include "ipc_lease.h"
#include "runtime.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

namespace openreg::runtime {
namespace {

constexpr size_t kSlotBytes = sizeof(SharedEventState);
constexpr size_t kSlotCount = 16384;  // interprocess events alive at once, per process
constexpr const char* kEventFileName = "openreg-ipc-events";
// A sleeping waiter wakes this often to see whether the exporter still lives.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(20);
constexpr auto kSpinBudget = std::chrono::microseconds(50);

void futexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  struct timespec relative;
  relative.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  relative.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Shared (not FUTEX_PRIVATE): the word lives in a mapping other processes wake.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &relative, nullptr,
          0);
}

// This process's slots. Created at the first interprocess event; never
// destroyed (queued records may complete while the process exits).
class EventFile {
 public:
  static EventFile& instance() {
    static EventFile* file = new EventFile();
    return *file;
  }

  int fd() const { return fd_; }
  SharedEventState* state(size_t slot) const {
    return reinterpret_cast<SharedEventState*>(static_cast<char*>(base_) + slot);
  }

  // A free slot, locked exclusively (the exporter's liveness, see ipc_event.h).
  size_t take() {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      check(next_ < kSlotCount * kSlotBytes, orErrorOutOfMemory, "all ", kSlotCount,
            " interprocess events of this process are in use; destroy events you no longer "
            "need (an event's slot is free once its records have completed)");
      slot = next_;
      next_ += kSlotBytes;
    }
    setRangeLock(fd_, slot, 1, F_WRLCK);
    return slot;
  }

  void give(size_t slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    setRangeLock(fd_, slot, 1, F_UNLCK);
    free_.push_back(slot);
  }

 private:
  EventFile() {
    fd_ = memfd_create(kEventFileName, MFD_CLOEXEC);
    check(fd_ >= 0, orErrorInitialization,
          "memfd_create failed for interprocess events: ", std::strerror(errno));
    const size_t bytes = kSlotCount * kSlotBytes;
    void* mapped = MAP_FAILED;
    if (ftruncate(fd_, static_cast<off_t>(bytes)) == 0) {
      mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    }
    if (mapped == MAP_FAILED) {
      const int error = errno;
      close(fd_);
      fail(orErrorInitialization, "cannot map the interprocess event file: ", std::strerror(error));
    }
    base_ = mapped;
  }

  int fd_ = -1;
  void* base_ = nullptr;
  std::mutex mutex_;
  std::vector<size_t> free_;
  size_t next_ = 0;
};

}  // namespace

// ---- Exporting side ---------------------------------------------------------

std::shared_ptr<ExportedEvent> ExportedEvent::create(int device) {
  const size_t slot = EventFile::instance().take();
  return std::shared_ptr<ExportedEvent>(new ExportedEvent(device, slot));
}

ExportedEvent::ExportedEvent(int device, size_t slot)
    : device_(device), slot_(slot), state_(EventFile::instance().state(slot)) {
  state_->exporterPid = static_cast<int32_t>(getpid());
  // Counters carry on from the slot's previous event: they only grow, so a
  // waiter of the previous event can never see its record undone.
  generation_ = state_->recorded.load(std::memory_order_relaxed);
}

ExportedEvent::~ExportedEvent() {
  // Every record has completed (queued records own this object).
  state_->epoch.fetch_add(1, std::memory_order_release);
  try {
    EventFile::instance().give(slot_);
  } catch (...) {
    // Unlocking cannot fail on a valid descriptor; a slot lost is harmless.
  }
}

uint64_t ExportedEvent::record(const std::shared_ptr<Stream>& stream, Stream::Work marker) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A record on another stream than the previous one waits for it first, so
  // records complete in order (see ipc_event.h).
  if (lastStream_ && lastStream_ != stream && !lastStream_->isComplete(lastSequence_)) {
    stream->enqueue(
        [previous = lastStream_, sequence = lastSequence_] { previous->waitFor(sequence); });
  }
  const uint64_t generation = generation_ + 1;
  const uint64_t sequence =
      stream->enqueue([self = shared_from_this(), generation, marker = std::move(marker)] {
        marker();
        self->complete(generation);
      });
  generation_ = generation;
  state_->recorded.store(generation, std::memory_order_release);
  lastStream_ = stream;
  lastSequence_ = sequence;
  return sequence;
}

void ExportedEvent::complete(uint64_t generation) {
  uint64_t known = state_->completed.load(std::memory_order_relaxed);
  while (known < generation &&
         !state_->completed.compare_exchange_weak(known, generation, std::memory_order_seq_cst)) {
  }
  state_->wakeups.fetch_add(1, std::memory_order_seq_cst);
  if (state_->sleepers.load(std::memory_order_seq_cst) > 0) futexWake(&state_->wakeups);
}

void ExportedEvent::describe(orIpcEventHandle_t& handle) const {
  std::memset(&handle, 0, sizeof(handle));
  handle.fd = reopenFile(EventFile::instance().fd());
  handle.device = device_;
  handle.slot = slot_;
  handle.epoch = state_->epoch.load(std::memory_order_acquire);
  handle.exporterPid = state_->exporterPid;
}

// ---- Importing side ---------------------------------------------------------

std::shared_ptr<ImportedEvent> ImportedEvent::open(const orIpcEventHandle_t& handle) {
  const std::string description = fileDescription(handle.fd);
  check(description.rfind(std::string("/memfd:") + kEventFileName, 0) == 0, orErrorInvalidValue,
        "orIpcOpenEventHandle: handle.fd ", handle.fd,
        " is not the descriptor of an OpenReg interprocess event file (it is ",
        description.empty() ? "not an open descriptor" : description,
        "); pass the descriptor received with the handle");
  struct stat status;
  check(fstat(handle.fd, &status) == 0 && handle.slot % kSlotBytes == 0 &&
            handle.slot + kSlotBytes <= static_cast<unsigned long long>(status.st_size),
        orErrorInvalidValue, "orIpcOpenEventHandle: slot ", handle.slot,
        " is not an event slot of the handle's file");
  Runtime::instance().checkDeviceIndex(handle.device);
  const int fd = reopenFile(handle.fd);
  const size_t page = pageSize();
  const size_t pageStart = handle.slot / page * page;
  void* mapped =
      mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(pageStart));
  if (mapped == MAP_FAILED) {
    const int error = errno;
    close(fd);
    fail(orErrorUnknown, "cannot map an interprocess event: ", std::strerror(error));
  }
  // A child forked later must not keep the exporter's file (and so its
  // liveness lock's meaning) alive through this mapping.
  madvise(mapped, page, MADV_DONTFORK);
  return std::shared_ptr<ImportedEvent>(
      new ImportedEvent(fd, mapped, page, handle.slot - pageStart, handle));
}

ImportedEvent::ImportedEvent(int fd, void* page, size_t pageLength, size_t slot,
                             const orIpcEventHandle_t& handle)
    : fd_(fd),
      page_(page),
      pageLength_(pageLength),
      slot_(handle.slot),
      state_(reinterpret_cast<SharedEventState*>(static_cast<char*>(page) + slot)),
      epoch_(handle.epoch),
      device_(handle.device),
      exporterPid_(handle.exporterPid) {}

ImportedEvent::~ImportedEvent() {
  munmap(page_, pageLength_);
  close(fd_);
}

uint64_t ImportedEvent::latestRecord() const {
  const uint64_t before = state_->epoch.load(std::memory_order_acquire);
  const uint64_t record = state_->recorded.load(std::memory_order_acquire);
  const uint64_t after = state_->epoch.load(std::memory_order_acquire);
  return before == epoch_ && after == epoch_ ? record : 0;
}

bool ImportedEvent::hasCompleted(uint64_t record) const {
  return record == 0 || state_->completed.load(std::memory_order_seq_cst) >= record ||
         state_->epoch.load(std::memory_order_acquire) != epoch_;
}

bool ImportedEvent::exporterAlive() const { return rangeLockedByOthers(fd_, slot_, 1, F_WRLCK); }

void ImportedEvent::failExporterGone(uint64_t record) const {
  fail(orErrorLaunchFailure, "the process that recorded this interprocess event (pid ",
       exporterPid_, ") exited before record ", record,
       " completed: the work it was recorded after will never complete, and what it wrote is "
       "incomplete");
}

void ImportedEvent::waitFor(uint64_t record) const {
  const auto spinUntil = std::chrono::steady_clock::now() + kSpinBudget;
  while (std::chrono::steady_clock::now() < spinUntil) {
    if (hasCompleted(record)) return;
    std::this_thread::yield();
  }
  for (;;) {
    const uint32_t observed = state_->wakeups.load(std::memory_order_seq_cst);
    if (hasCompleted(record)) return;
    state_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!hasCompleted(record)) futexWait(&state_->wakeups, observed, kLivenessPeriod);
    state_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (hasCompleted(record)) return;
    if (!exporterAlive()) {
      if (hasCompleted(record)) return;  // completed just before the exporter let go
      failExporterGone(record);
    }
  }
}

void ImportedEvent::query() const {
  const uint64_t record = latestRecord();
  if (hasCompleted(record)) return;
  if (!exporterAlive() && !hasCompleted(record)) failExporterGone(record);
  fail(orErrorNotReady, "the event's work in process ", exporterPid_, " has not completed yet");
}

void ImportedEvent::describe(orIpcEventHandle_t& handle) const {
  std::memset(&handle, 0, sizeof(handle));
  handle.fd = reopenFile(fd_);
  handle.device = device_;
  handle.slot = slot_;
  handle.epoch = epoch_;
  handle.exporterPid = exporterPid_;
}

}  // namespace openreg::runtime
