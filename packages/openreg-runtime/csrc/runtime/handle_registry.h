// handle_registry.h — maps opaque C handles to live objects.
//
// Handles are the addresses of the objects, but they are only ever
// dereferenced after being found here, so a destroyed or made-up handle is
// reported as orErrorInvalidResourceHandle instead of crashing.
#pragma once

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

  std::shared_ptr<Object> get(const void* handle) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = live_.find(handle);
    if (found == live_.end()) {
      fail(orErrorInvalidResourceHandle, kind_, " handle ", handle, " is unknown or was destroyed");
    }
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
    return object;
  }

 private:
  const char* kind_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::shared_ptr<Object>> live_;
};

}  // namespace openreg::runtime
