// event.cpp — recording markers on streams.
#include "event.h"

namespace openreg::runtime {

void Event::record(const std::shared_ptr<Stream>& stream) {
  auto record = std::make_shared<Record>();
  record->stream = stream;
  const bool stampTime = timing_;
  // The marker holds the record weakly: an event destroyed while its marker
  // is queued must not keep the stream alive through a reference cycle.
  std::weak_ptr<Record> weakRecord = record;
  auto marker = [weakRecord, stampTime] {
    if (!stampTime) return;
    if (auto alive = weakRecord.lock()) alive->reachedAt = std::chrono::steady_clock::now();
  };
  record->sequence =
      exported_ ? exported_->record(stream, std::move(marker)) : stream->enqueue(std::move(marker));
  std::lock_guard<std::mutex> lock(mutex_);
  latest_ = std::move(record);
}

std::shared_ptr<Event::Record> Event::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

}  // namespace openreg::runtime
