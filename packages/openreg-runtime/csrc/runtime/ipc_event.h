// ipc_event.h — events shared between processes (orEventInterprocess).
//
// An interprocess event keeps, besides its in-process record (event.h), a
// 64-byte state in a file shared with other processes: how many times it was
// recorded and how many of those records have completed. Records of one
// event complete in the order they were made: a record on another stream
// than the previous one first makes its stream wait for that record, so
// "completed >= n" means "record n has completed", and an importer waits for
// the record that was the latest when it started waiting (CUDA's rule) by
// comparing two counters. A completion bumps a futex word that sleeping
// waiters of any process wait on.
//
// The states of all of a process's interprocess events live in one memfd
// (openreg-ipc-events), one slot each. The exporter holds an exclusive lock
// on the first byte of the slot while the event or a queued record of it
// exists (ipc_lease.h): a waiter that finds the lock gone while the record it
// waits for is incomplete knows the exporter died, and fails instead of
// waiting forever. A slot passes to another event only after the previous
// one's records all completed; its epoch changes then, so that a stale
// importer sees its event as complete instead of following the new one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "openreg.h"
#include "stream.h"

namespace openreg::runtime {

struct SharedEventState {
  std::atomic<uint64_t> epoch;      // changes when the slot passes to another event
  std::atomic<uint64_t> recorded;   // records made so far (the latest's number)
  std::atomic<uint64_t> completed;  // records completed, in order
  std::atomic<uint32_t> wakeups;    // futex word, bumped at each completion
  std::atomic<uint32_t> sleepers;   // waiters asleep on `wakeups`, in any process
  int32_t exporterPid;
  uint8_t unused[28];
};
static_assert(sizeof(SharedEventState) == 64, "one slot per event, 64 bytes");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// The exporting side: the state of one interprocess event of this process.
class ExportedEvent : public std::enable_shared_from_this<ExportedEvent> {
 public:
  // Takes a free slot (orErrorOutOfMemory when every slot is in use).
  static std::shared_ptr<ExportedEvent> create(int device);
  ~ExportedEvent();
  ExportedEvent(const ExportedEvent&) = delete;
  ExportedEvent& operator=(const ExportedEvent&) = delete;

  // Enqueues a record on `stream`: `marker` (the in-process record's work),
  // then the shared completion. Returns the marker's sequence number.
  uint64_t record(const std::shared_ptr<Stream>& stream, Stream::Work marker);
  // Fills a handle whose descriptor is a new description of the event file.
  void describe(orIpcEventHandle_t& handle) const;

 private:
  ExportedEvent(int device, size_t slot);
  void complete(uint64_t generation);

  const int device_;
  const size_t slot_;  // byte offset of the state in the event file
  SharedEventState* state_;
  std::mutex mutex_;  // orders records
  uint64_t generation_ = 0;
  std::shared_ptr<Stream> lastStream_;
  uint64_t lastSequence_ = 0;
};

// The importing side: another process's event, mapped from its handle.
class ImportedEvent {
 public:
  static std::shared_ptr<ImportedEvent> open(const orIpcEventHandle_t& handle);
  ~ImportedEvent();
  ImportedEvent(const ImportedEvent&) = delete;
  ImportedEvent& operator=(const ImportedEvent&) = delete;

  int device() const { return device_; }
  // The number of the exporter's latest record (0: none, or the event is gone).
  uint64_t latestRecord() const;
  bool hasCompleted(uint64_t record) const;
  // Waits until `record` has completed; throws ApiError(orErrorLaunchFailure)
  // if the exporter exits first.
  void waitFor(uint64_t record) const;
  // orSuccess, orErrorNotReady, or the failure waitFor would throw.
  void query() const;
  // A handle for re-exporting (a new description of the same file).
  void describe(orIpcEventHandle_t& handle) const;

 private:
  ImportedEvent(int fd, void* page, size_t pageLength, size_t slot,
                const orIpcEventHandle_t& handle);
  bool exporterAlive() const;
  [[noreturn]] void failExporterGone(uint64_t record) const;

  const int fd_;
  void* const page_;
  const size_t pageLength_;
  const size_t slot_;
  SharedEventState* const state_;
  const uint64_t epoch_;
  const int device_;
  const int exporterPid_;
};

}  // namespace openreg::runtime
