// handle_registry.h — maps opaque C handles to live objects.
//
// Handles are the addresses of the objects, but they are only ever
// dereferenced after being found here, so a destroyed or made-up handle is
// reported as orErrorInvalidResourceHandle instead of crashing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "errors.h"

namespace openreg::runtime {

template <typename Object>
class HandleRegistry {
 public:
  explicit HandleRegistry(const char* kind) : kind_(kind) {}

  void* add(std::shared_ptr<Object> object) {
    void* handle = object.get();
    std::lock_guard<std::mutex> lock(mutex_);
    live_.emplace(handle, std::move(object));
    return handle;
  }

  // Every launch, query and allocation resolves its stream, from the host
  // threads and the workers alike: each thread remembers the last handle it
  // resolved, valid until something is removed, so the mutex is taken only
  // when the handle changes. (The remembered object stays alive meanwhile,
  // so its address cannot be reused by another.)
  std::shared_ptr<Object> get(const void* handle) const {
    thread_local Resolved last;
    const uint64_t generation = removals_.load(std::memory_order_acquire);
    if (last.registry == this && last.handle == handle && last.generation == generation) {
      return last.object;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(handle);
    if (found == live_.end()) {
      fail(orErrorInvalidResourceHandle, kind_, " handle ", handle, " is unknown or was destroyed");
    }
    last = Resolved{this, handle, generation, found->second};
    return found->second;
  }

  std::shared_ptr<Object> remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(handle);
    if (found == live_.end()) {
      fail(orErrorInvalidResourceHandle, kind_, " handle ", handle,
           " is unknown or was already destroyed");
    }
    std::shared_ptr<Object> object = std::move(found->second);
    live_.erase(found);
    removals_.fetch_add(1, std::memory_order_release);
    return object;
  }

 private:
  struct Resolved {
    const HandleRegistry* registry = nullptr;
    const void* handle = nullptr;
    uint64_t generation = 0;
    std::shared_ptr<Object> object;
  };

  const char* kind_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::shared_ptr<Object>> live_;
  std::atomic<uint64_t> removals_{0};
};

}  // namespace openreg::runtime
