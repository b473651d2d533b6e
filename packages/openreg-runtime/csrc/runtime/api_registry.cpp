// api_registry.cpp — C entry points for the process registry and device capacity.
#include <algorithm>
#include <cstring>

#include "device_registry.h"
#include "errors.h"
#include "runtime.h"

using namespace openreg::runtime;

extern "C" {

orError_t orDeviceTotalMem(size_t* bytes, int device) {
  return runApi([&] {
    checkNotNull(bytes, "bytes");
    Runtime& runtime = Runtime::instance();
    runtime.checkDeviceIndex(device);
    *bytes = runtime.config().deviceMemoryBytes;
  });
}

orError_t orGetProcessUsage(orProcessUsage* entries, unsigned int* count) {
  return runApi([&] {
    checkNotNull(count, "count");
    check(entries != nullptr || *count == 0, orErrorInvalidValue,
          "entries must not be NULL when *count (its capacity) is ", *count);
    const std::vector<ProcessUsage> usage = listProcessUsage();
    const size_t written = std::min<size_t>(*count, usage.size());
    for (size_t i = 0; i < written; ++i) {
      orProcessUsage& entry = entries[i];
      std::memset(&entry, 0, sizeof entry);
      entry.pid = usage[i].pid;
      entry.device = usage[i].device;
      entry.startTime = usage[i].startTime;
      std::strncpy(entry.name, usage[i].name.c_str(), sizeof entry.name - 1);
      entry.bytesInUse = usage[i].bytesInUse;
      entry.capacity = usage[i].capacity;
      entry.utilization = usage[i].utilization;
    }
    *count = static_cast<unsigned int>(usage.size());
  });
}

}  // extern "C"
