// event.h — an event marks a point in a stream's work.
//
// Recording enqueues a marker on the stream; the marker stamps the time when
// the worker reaches it. Each record is a fresh Record object, so re-recording
// an event never disturbs waiters on the previous record.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "stream.h"

namespace openreg::runtime {

class Event {
 public:
  struct Record {
    std::shared_ptr<Stream> stream;
    uint64_t sequence = 0;
    std::chrono::steady_clock::time_point reachedAt;  // written by the marker
  };

  Event(int device, bool timing) : device_(device), timing_(timing) {}

  void record(const std::shared_ptr<Stream>& stream);
  // The most recent record, or nullptr if never recorded.
  std::shared_ptr<Record> latest() const;

  int device() const { return device_; }
  bool timing() const { return timing_; }

 private:
  const int device_;
  const bool timing_;
  mutable std::mutex mutex_;
  std::shared_ptr<Record> latest_;
};

}  // namespace openreg::runtime
