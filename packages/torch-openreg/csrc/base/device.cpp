// device.cpp — current device / count helpers over the runtime.
#include "base/device.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>

#include "base/runtime_check.h"

namespace torch_openreg {
namespace {

std::array<std::atomic<bool>, OPENREG_MAX_DEVICES> usedDevices{};

// The smallest device this binding accepts. Its caching allocator
// (memory/block_pool.cpp) cuts every block from a segment of at least 2 MiB, so
// a smaller device cannot hold a single tensor; the runtime, which knows nothing
// of the allocator, accepts 1 MiB. The test
// test_device_memory_of_one_allocator_segment_holds_a_tensor keeps the two together.
constexpr size_t kMinimumDeviceMemory = size_t{2} << 20;

std::string trimmedVariable(const char* name) {
  const char* raw = std::getenv(name);
  std::string value = raw == nullptr ? "" : raw;
  const size_t begin = value.find_first_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  return value.substr(begin, value.find_last_not_of(" \t\n") - begin + 1);
}

void checkDeviceMemory() {
  size_t capacity = 0;
  OPENREG_CHECK(orDeviceTotalMem(&capacity, 0));  // every device has the same capacity
  if (capacity >= kMinimumDeviceMemory) return;
  const std::string value = trimmedVariable("OPENREG_DEVICE_MEMORY");
  const bool bareNumber =
      !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
  TORCH_CHECK(false, "OPENREG_DEVICE_MEMORY='", value,
              "' is invalid: torch-openreg's caching allocator needs at least 2MiB per device "
              "(its smallest memory segment), so no tensor fits in a device of ",
              capacity, " bytes", bareNumber ? " (a bare number is bytes)" : "",
              "; set it to 2MiB or more, such as '512MiB', or unset it for a quarter of physical "
              "RAM per device");
}

// The runtime reads the environment once per process, so the count is read once
// here too (every operator validates its device index against it). A failure is
// not cached: it raises, naming the bad environment, each time it is asked.
int countFromRuntime() {
  static std::atomic<int> cached{-1};
  int count = cached.load(std::memory_order_relaxed);
  if (count >= 0) return count;
  OPENREG_CHECK(orGetDeviceCount(&count));
  checkDeviceMemory();
  cached.store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace

c10::DeviceIndex deviceCount() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(countFromRuntime());
  } catch (const c10::Error& error) {
    // torch.cuda's wording for a driver that cannot be used. Once: a program that
    // asks for the count in a loop hears it once, like CUDA's.
    TORCH_WARN_ONCE("openreg initialization: ", error.msg(),
                    "; no openreg device can be used until it is fixed "
                    "(torch.openreg.is_available() is False)");
    return 0;
  }
}

void checkDeviceEnvironment() { countFromRuntime(); }

c10::DeviceIndex currentDevice() {
  int device = 0;
  OPENREG_CHECK(orGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void setCurrentDevice(c10::DeviceIndex device) {
  OPENREG_CHECK(orSetDevice(checkedDevice(device)));
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) {
  const c10::DeviceIndex previous = currentDevice();
  if (device >= 0 && device != previous) setCurrentDevice(device);
  return previous;
}

c10::DeviceIndex checkedDevice(c10::DeviceIndex device) {
  const int count = countFromRuntime();
  if (C10_LIKELY(device >= 0 && device < count)) return device;
  const bool one = count == 1;
  TORCH_CHECK(false, "Invalid openreg device index ", static_cast<int>(device), ": there ",
              one ? "is " : "are ", count,
              one ? " openreg device (valid index 0)" : " openreg devices",
              one ? "" : " (valid indices 0..", one ? "" : std::to_string(count - 1),
              one ? "" : ")", "; set OPENREG_DEVICE_COUNT to change the count");
}

c10::DeviceIndex resolveDevice(c10::DeviceIndex device) {
  return device < 0 ? currentDevice() : checkedDevice(device);
}

void markDeviceUsed(c10::DeviceIndex device) {
  if (device >= 0 && device < OPENREG_MAX_DEVICES) usedDevices[device].store(true);
}

bool deviceUsed(c10::DeviceIndex device) {
  return device >= 0 && device < OPENREG_MAX_DEVICES && usedDevices[device].load();
}

DeviceScope::DeviceScope(c10::DeviceIndex device) : previous_(currentDevice()) {
  if (device != previous_) setCurrentDevice(device);
}

DeviceScope::~DeviceScope() {
  int now = 0;
  if (succeeded(orGetDevice(&now)) && now != previous_) succeeded(orSetDevice(previous_));
}

orEvent_t recordEventOrNull(orStream_t stream) {
  int device = 0;
  if (!succeeded(orStreamGetDevice(stream, &device))) return nullptr;
  DeviceScope scope(static_cast<c10::DeviceIndex>(device));
  orEvent_t event = nullptr;
  if (!succeeded(orEventCreateWithFlags(&event, orEventDisableTiming))) return nullptr;
  if (succeeded(orEventRecord(event, stream))) return event;
  orEventDestroy(event);
  return nullptr;
}

}  // namespace torch_openreg
