// event.h — an event marks a point in a stream's work.
//
// Recording enqueues a marker on the stream; the marker stamps the time when
// the worker reaches it. Each record is a fresh Record object, so re-recording
// an event never disturbs waiters on the previous record. An interprocess
// event also publishes its records' completion to other processes, and an
// event imported from another process has no records of its own: it follows
// the exporter's (ipc_event.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "ipc_event.h"
#include "stream.h"

namespace openreg::runtime {

class Event {
 public:
  struct Record {
    std::shared_ptr<Stream> stream;
    uint64_t sequence = 0;
    std::chrono::steady_clock::time_point reachedAt;  // written by the marker
  };

  Event(int device, bool timing, std::shared_ptr<ExportedEvent> exported = nullptr)
      : device_(device), timing_(timing), exported_(std::move(exported)) {}
  Event(int device, std::shared_ptr<ImportedEvent> imported)
      : device_(device), timing_(false), imported_(std::move(imported)) {}

  void record(const std::shared_ptr<Stream>& stream);
  // The most recent record, or nullptr if never recorded.
  std::shared_ptr<Record> latest() const;

  int device() const { return device_; }
  bool timing() const { return timing_; }
  // Set for an orEventInterprocess event of this process / one of another process.
  const std::shared_ptr<ExportedEvent>& exported() const { return exported_; }
  const std::shared_ptr<ImportedEvent>& imported() const { return imported_; }

 private:
  const int device_;
  const bool timing_;
  const std::shared_ptr<ExportedEvent> exported_;
  const std::shared_ptr<ImportedEvent> imported_;
  mutable std::mutex mutex_;
  std::shared_ptr<Record> latest_;
};

}  // namespace openreg::runtime
