// device_registry.cpp — publishing this process's counters, listing everyone's.
#include "device_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "environment.h"
#include "errors.h"

#include <sys/mman.h>
#include <sys/stat.h>

namespace openreg::runtime {
namespace {

constexpr const char* kFilePrefix = "proc-";
constexpr const char* kTemporaryPrefix = ".tmp-";
constexpr uint64_t kSampleSpacingNs = kUtilizationWindowNs / 8;
constexpr int kSeqlockAttempts = 1000;

// OPENREG_REGISTRY_DIR, when set: any directory a user chose, such as /tmp.
const char* configuredDirectory() {
  const char* configured = std::getenv("OPENREG_REGISTRY_DIR");
  return configured != nullptr && configured[0] != '\0' ? configured : nullptr;
}

std::string registryDirectory() {
  const char* configured = configuredDirectory();
  return configured != nullptr ? configured : "/dev/shm/openreg-" + std::to_string(geteuid());
}

// What to do about a registry directory that cannot be used. The default
// directory exists only for OpenReg, so it may be repaired or removed; a
// configured one may be a shared system directory (/tmp, /dev/shm) or a home,
// which must never be changed: the advice there is to choose another.
std::string directoryAdvice(const std::string& path, bool owned) {
  const std::string privateDirectory =
      "a directory of its own that you own with mode 0700 (mkdir -m 700 DIR)";
  if (configuredDirectory() != nullptr) {
    return "point OPENREG_REGISTRY_DIR at " + privateDirectory +
           ", or unset it for the default /dev/shm/openreg-<uid>";
  }
  if (owned) {
    return "OpenReg creates it with mode 0700: run chmod 700 " + path +
           ", or set OPENREG_REGISTRY_DIR to " + privateDirectory;
  }
  return "another user created it (perhaps to read this user's counters): have its owner or an "
         "administrator remove " +
         path + ", or set OPENREG_REGISTRY_DIR to " + privateDirectory;
}

// Opens the registry directory, creating it (mode 0700) when `create`.
// Returns -1 if it does not exist; throws orErrorNotPermitted if anyone but
// this user could read or plant files in it (another user may have created
// it first to watch ours), so its files are never trusted or written.
int openDirectory(const std::string& path, bool create) {
  if (path.empty() || path[0] != '/') {
    fail(orErrorNotPermitted, "OPENREG_REGISTRY_DIR='", path,
         "' is invalid: give an absolute directory path (default /dev/shm/openreg-<uid>)");
  }
  if (create && mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    fail(orErrorNotPermitted, "cannot create the OpenReg registry directory ", path, ": ",
         std::strerror(errno));
  }
  const int directory = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (directory < 0) {
    if (errno == ENOENT) return -1;
    const int error = errno;
    fail(orErrorNotPermitted, "cannot open the OpenReg registry directory ", path, ": ",
         std::strerror(error),
         " (it must be a directory, not a symbolic link): ", directoryAdvice(path, false));
  }
  struct stat status{};
  if (fstat(directory, &status) != 0 || status.st_uid != geteuid() || (status.st_mode & 077) != 0) {
    close(directory);
    fail(orErrorNotPermitted, "the OpenReg registry directory ", path,
         " must belong to this user (uid ", geteuid(),
         ") with no access for group or others (mode 0700); it has uid ", status.st_uid,
         " and mode 0", std::oct, (status.st_mode & 07777), std::dec, ": ",
         directoryAdvice(path, status.st_uid == geteuid()));
  }
  return directory;
}

struct ProcessStatus {
  uint64_t startTime;  // field 22: clock ticks after boot
  bool ended;          // exited but not yet reaped (a zombie)
};

// Fields of /proc/<pid>/stat. A pid reused by a newer process has a later
// start time. A zombie has exited and holds no memory, but keeps its pid
// until its parent reaps it: state Z (or X/x, being reaped). The state is that
// of the main thread, which may have exited while other threads still run:
// such a process is a zombie only once it is down to that one thread.
std::optional<ProcessStatus> processStatus(int pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  // "pid (name) state ...": the name may contain spaces and parentheses, but
  // nothing after it does, so the fields start after the last ')'.
  const size_t commEnd = text.rfind(')');
  if (commEnd == std::string::npos) return std::nullopt;
  constexpr int kFirst = 3, kState = 3, kThreads = 20, kStartTime = 22;
  std::istringstream stream(text.substr(commEnd + 1));
  std::vector<std::string> fields;  // fields[0] is field kFirst
  for (std::string field; fields.size() <= kStartTime - kFirst && stream >> field;) {
    fields.push_back(field);
  }
  if (fields.size() <= kStartTime - kFirst) return std::nullopt;
  const std::string& state = fields[kState - kFirst];
  const uint64_t threads = std::strtoull(fields[kThreads - kFirst].c_str(), nullptr, 10);
  return ProcessStatus{std::strtoull(fields[kStartTime - kFirst].c_str(), nullptr, 10),
                       (state == "Z" || state == "X" || state == "x") && threads <= 1};
}

std::optional<uint64_t> processStartTime(int pid) {
  const std::optional<ProcessStatus> status = processStatus(pid);
  if (!status) return std::nullopt;
  return status->startTime;
}

uint64_t ownPidNamespace() {
  struct stat status{};
  return stat("/proc/self/ns/pid", &status) == 0 ? static_cast<uint64_t>(status.st_ino) : 0;
}

std::string fileName(const char* prefix, int pid, uint64_t startTime) {
  return prefix + std::to_string(pid) + "-" + std::to_string(startTime);
}

// Parses "<prefix><pid>-<start time>".
bool parseFileName(const std::string& name, const char* prefix, int& pid, uint64_t& startTime) {
  const size_t prefixLength = std::strlen(prefix);
  if (name.compare(0, prefixLength, prefix) != 0) return false;
  char* end = nullptr;
  const long parsedPid = std::strtol(name.c_str() + prefixLength, &end, 10);
  if (end == nullptr || *end != '-' || parsedPid <= 0) return false;
  char* startEnd = nullptr;
  startTime = std::strtoull(end + 1, &startEnd, 10);
  if (startEnd == end + 1 || *startEnd != '\0') return false;
  pid = static_cast<int>(parsedPid);
  return true;
}

bool processIsGone(int pid, uint64_t startTime) {
  const std::optional<ProcessStatus> current = processStatus(pid);
  return !current || current->startTime != startTime || current->ended;
}

void pruneStaleFiles(int directory);

// ---- This process's record file -------------------------------------------

struct OwnRecord {
  RegistryFile* file = nullptr;
  std::string path;
  pid_t owner = 0;
};

OwnRecord& ownRecord() {
  static OwnRecord* record = new OwnRecord();  // never destroyed: workers run during exit
  return *record;
}

void removeOwnFileAtExit() {
  const OwnRecord& record = ownRecord();
  // A forked child inherits the handler but must not remove its parent's file.
  if (record.file != nullptr && getpid() == record.owner) unlink(record.path.c_str());
}

std::string ownProcessName() {
  std::ifstream file("/proc/self/comm");
  std::string name;
  std::getline(file, name);
  return name;
}

RegistryFile* mapNewFile(int directory, const std::string& temporary) {
  const int fd = openat(directory, temporary.c_str(),
                        O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  void* mapping = MAP_FAILED;
  if (ftruncate(fd, sizeof(RegistryFile)) == 0) {
    mapping = mmap(nullptr, sizeof(RegistryFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (mapping == MAP_FAILED) {
    unlinkat(directory, temporary.c_str(), 0);
    return nullptr;
  }
  return static_cast<RegistryFile*>(mapping);  // zero-filled: every counter starts at 0
}

// Creates the file under a temporary name and renames it when complete, so
// readers never see a half-written header. Leaves record.file null on failure.
void createOwnFile() {
  OwnRecord& record = ownRecord();
  const int pid = static_cast<int>(getpid());
  const std::optional<uint64_t> startTime = processStartTime(pid);
  if (!startTime) return;
  int directory = -1;
  try {
    directory = openDirectory(registryDirectory(), true);
  } catch (const ApiError&) {
    return;  // the runtime works without the registry; readers report the problem
  }
  if (directory < 0) return;
  pruneStaleFiles(directory);
  const std::string temporary = fileName(kTemporaryPrefix, pid, *startTime);
  const std::string final = fileName(kFilePrefix, pid, *startTime);
  // Same pid and start time: an earlier program image of this very process (exec).
  unlinkat(directory, temporary.c_str(), 0);
  RegistryFile* file = mapNewFile(directory, temporary);
  if (file != nullptr) {
    file->pid = static_cast<uint32_t>(pid);
    file->startTime = *startTime;
    file->pidNamespace = ownPidNamespace();
    std::strncpy(file->name, ownProcessName().c_str(), sizeof(file->name) - 1);
    file->version = kRegistryVersion;
    file->magic = kRegistryMagic;
    if (renameat(directory, temporary.c_str(), directory, final.c_str()) == 0) {
      record.file = file;
      record.path = registryDirectory() + "/" + final;
      record.owner = getpid();
      std::atexit(removeOwnFileAtExit);
    } else {
      munmap(file, sizeof(RegistryFile));
      unlinkat(directory, temporary.c_str(), 0);
    }
  }
  close(directory);
}

// ---- Reading other processes' files ----------------------------------------

struct BusySnapshot {
  uint64_t totalNs = 0;
  uint64_t sinceNs = 0;
  std::array<uint64_t, kBusySamples> sampleTimeNs{};
  std::array<uint64_t, kBusySamples> sampleBusyNs{};
};

BusySnapshot readBusy(const RegistryDeviceRecord& record) {
  BusySnapshot snapshot;
  // Seqlock: retry while a writer is inside; bounded, because a writer
  // stopped mid-write (SIGSTOP, SIGKILL) would otherwise hold us forever.
  for (int attempt = 0; attempt < kSeqlockAttempts; ++attempt) {
    // Acquire loads of the fields keep the second sequence load after them
    // (no standalone fences: ThreadSanitizer does not support them).
    const uint32_t before = record.sequence.load(std::memory_order_acquire);
    snapshot.totalNs = record.busyTotalNs.load(std::memory_order_acquire);
    snapshot.sinceNs = record.busySinceNs.load(std::memory_order_acquire);
    for (int i = 0; i < kBusySamples; ++i) {
      snapshot.sampleTimeNs[i] = record.sampleTimeNs[i].load(std::memory_order_acquire);
      snapshot.sampleBusyNs[i] = record.sampleBusyNs[i].load(std::memory_order_acquire);
    }
    if ((before & 1) == 0 && record.sequence.load(std::memory_order_relaxed) == before) break;
  }
  return snapshot;
}

unsigned utilizationOf(const BusySnapshot& busy, uint64_t now) {
  // The base is the newest sample at least one window old (so the average
  // spans the window, plus at most one sample spacing of work boundaries),
  // or the oldest sample when the device is younger than the window.
  int base = -1;
  for (int i = 0; i < kBusySamples; ++i) {
    const uint64_t time = busy.sampleTimeNs[i];
    if (time == 0 || time > now) continue;
    const bool old = now - time >= kUtilizationWindowNs;
    if (base < 0) {
      base = i;
      continue;
    }
    const uint64_t baseTime = busy.sampleTimeNs[base];
    const bool baseOld = now - baseTime >= kUtilizationWindowNs;
    if ((old && (!baseOld || time > baseTime)) || (!old && !baseOld && time < baseTime)) base = i;
  }
  if (base < 0 || busy.sampleTimeNs[base] >= now) return 0;
  const uint64_t interval = now - busy.sampleTimeNs[base];
  // Every counter came from shared memory and may hold anything: the sums
  // saturate, and busy time beyond the time that passed is cut to it.
  const uint64_t running = busy.sinceNs != 0 && busy.sinceNs <= now ? now - busy.sinceNs : 0;
  const uint64_t busyNow = busy.totalNs > std::numeric_limits<uint64_t>::max() - running
                               ? std::numeric_limits<uint64_t>::max()
                               : busy.totalNs + running;
  const uint64_t busyInterval =
      busyNow > busy.sampleBusyNs[base] ? busyNow - busy.sampleBusyNs[base] : 0;
  const double fraction =
      static_cast<double>(std::min(busyInterval, interval)) / static_cast<double>(interval);
  return static_cast<unsigned>(std::lround(fraction * 100));
}

// Whether one device's counters in a record could be true. A record is
// memory any process of this user can write, by mistake or on purpose: an
// entry whose counters could not have been written by the runtime is not
// listed (its owner rewrites them, see DeviceActivity::publishLocked).
bool plausible(uint32_t active, uint64_t capacity, uint64_t bytesInUse) {
  const uint64_t page = pageSize();
  return active == 1 && capacity >= kMinDeviceMemory && capacity <= kMaxDeviceMemory &&
         capacity % page == 0 && bytesInUse <= capacity && bytesInUse % page == 0;
}

// Opens `name` for reading if it is a regular file of this user, else -1.
// The registry reads only what it could have written: opening a FIFO planted
// under a record's name waits for a writer forever unless O_NONBLOCK, a
// device node is never made the controlling terminal (O_NOCTTY), symbolic
// links are refused (O_NOFOLLOW), and the file is judged by fstat on the open
// descriptor (a stat before opening could judge a file replaced meanwhile).
int openRegularFile(int directory, const std::string& name, struct stat& status) {
  const int fd =
      openat(directory, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fstat(fd, &status) != 0 || !S_ISREG(status.st_mode) || status.st_uid != geteuid()) {
    close(fd);
    return -1;
  }
  return fd;
}

// Appends the entries of one record file, or removes it when its process is gone.
void readRecordFile(int directory, const std::string& name, uint64_t pidNamespace, uint64_t now,
                    std::vector<ProcessUsage>& usage) {
  int pid = 0;
  uint64_t startTime = 0;
  struct stat status{};
  if (parseFileName(name, kTemporaryPrefix, pid, startTime)) {
    if (processIsGone(pid, startTime)) {  // crashed at birth
      const int fd = openRegularFile(directory, name, status);
      if (fd >= 0) {
        close(fd);
        unlinkat(directory, name.c_str(), 0);
      }
    }
    return;
  }
  if (!parseFileName(name, kFilePrefix, pid, startTime)) return;
  const int fd = openRegularFile(directory, name, status);
  if (fd < 0) return;  // removed meanwhile, or nothing the registry wrote
  void* mapping = MAP_FAILED;
  if (static_cast<size_t>(status.st_size) >= sizeof(RegistryFile)) {
    mapping = mmap(nullptr, sizeof(RegistryFile), PROT_READ, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (mapping == MAP_FAILED) return;
  const auto* file = static_cast<const RegistryFile*>(mapping);
  const bool wellFormed = file->magic == kRegistryMagic && file->version == kRegistryVersion &&
                          static_cast<int>(file->pid) == pid && file->startTime == startTime;
  // A pid is only meaningful in the pid namespace that wrote it: records of
  // other namespaces (containers sharing /dev/shm) are neither shown nor pruned.
  if (wellFormed && file->pidNamespace == pidNamespace) {
    if (processIsGone(pid, startTime)) {
      unlinkat(directory, name.c_str(), 0);
    } else {
      std::string processName(file->name, strnlen(file->name, sizeof(file->name)));
      for (int device = 0; device < OPENREG_MAX_DEVICES; ++device) {
        const RegistryDeviceRecord& record = file->devices[device];
        const uint32_t active = record.active.load(std::memory_order_acquire);
        if (active == 0) continue;
        const uint64_t capacity = record.capacity.load(std::memory_order_relaxed);
        const uint64_t bytesInUse = record.bytesInUse.load(std::memory_order_relaxed);
        if (!plausible(active, capacity, bytesInUse)) continue;
        usage.push_back(ProcessUsage{pid, device, startTime, processName, bytesInUse, capacity,
                                     utilizationOf(readBusy(record), now)});
      }
    }
  }
  munmap(mapping, sizeof(RegistryFile));
}

// Removes the files of processes that are gone. Run by each new process, so
// that records of crashed processes do not pile up in memory (/dev/shm)
// when nobody reads the registry.
void pruneStaleFiles(int directory) {
  const int listingFd = dup(directory);
  if (listingFd < 0) return;
  DIR* listing = fdopendir(listingFd);
  if (listing == nullptr) {
    close(listingFd);
    return;
  }
  const uint64_t pidNamespace = ownPidNamespace();
  const uint64_t now = monotonicNanoseconds();
  std::vector<ProcessUsage> ignored;
  while (const dirent* entry = readdir(listing)) {
    readRecordFile(directory, entry->d_name, pidNamespace, now, ignored);
  }
  closedir(listing);
}

}  // namespace

uint64_t monotonicNanoseconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

DeviceActivity& deviceActivity(int device) {
  static std::array<DeviceActivity, OPENREG_MAX_DEVICES>* activities =
      new std::array<DeviceActivity, OPENREG_MAX_DEVICES>();  // never destroyed, as above
  return (*activities)[device];
}

void DeviceActivity::attach(RegistryDeviceRecord* record, uint64_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  record_ = record;
  capacity_ = capacity;
  if (record_ != nullptr) publishLocked(monotonicNanoseconds());
}

void DeviceActivity::workStarted() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (record_ == nullptr) return;
  const uint64_t now = monotonicNanoseconds();
  if (running_++ == 0) busySinceNs_ = now;
  publishLocked(now);
}

void DeviceActivity::workFinished() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (record_ == nullptr || running_ == 0) return;
  const uint64_t now = monotonicNanoseconds();
  if (--running_ == 0) busyTotalNs_ += now - busySinceNs_;
  publishLocked(now);
}

void DeviceActivity::publishLocked(uint64_t now) {
  // A new sample at most every spacing; in between, going idle moves the newest
  // sample to this moment, so the samples always end where the work ended and a
  // device idle for one window reads exactly 0 %.
  const bool spaced = lastSampleNs_ == 0 || now - lastSampleNs_ >= kSampleSpacingNs;
  if (spaced || running_ == 0) {
    if (spaced) {
      sampleHead_ = (sampleHead_ + 1) % kBusySamples;
      lastSampleNs_ = now;
    }
    sampleTimeNs_[sampleHead_] = now;
    sampleBusyNs_[sampleHead_] = busyTotalNs_ + (running_ > 0 ? now - busySinceNs_ : 0);
  }
  // Everything below is stored from this object's own state and never read
  // back (see the class comment). A spaced publication rewrites the whole
  // ring, so a corrupted record is whole again within one sample spacing.
  RegistryDeviceRecord& record = *record_;
  record.capacity.store(capacity_, std::memory_order_relaxed);
  record.active.store(1, std::memory_order_release);
  // Seqlock write: the odd sequence, then release stores of the fields (a
  // reader that sees a new field value also sees the odd sequence).
  record.sequence.store(sequence_ + 1, std::memory_order_relaxed);
  record.busyTotalNs.store(busyTotalNs_, std::memory_order_release);
  record.busySinceNs.store(running_ > 0 ? busySinceNs_ : 0, std::memory_order_release);
  const uint32_t first = spaced ? 0 : sampleHead_;
  const uint32_t end = spaced ? kBusySamples : sampleHead_ + 1;
  for (uint32_t i = first; i < end; ++i) {
    record.sampleTimeNs[i].store(sampleTimeNs_[i], std::memory_order_release);
    record.sampleBusyNs[i].store(sampleBusyNs_[i], std::memory_order_release);
  }
  record.sampleHead.store(sampleHead_, std::memory_order_relaxed);
  sequence_ += 2;
  record.sequence.store(sequence_, std::memory_order_release);
}

std::atomic<uint64_t>* registerDevice(int device, size_t capacity) {
  static std::once_flag created;
  std::call_once(created, createOwnFile);
  RegistryFile* file = ownRecord().file;
  if (file == nullptr) return nullptr;
  RegistryDeviceRecord& record = file->devices[device];
  deviceActivity(device).attach(&record, capacity);  // publishes capacity, then active
  return &record.bytesInUse;
}

std::vector<ProcessUsage> listProcessUsage() {
  std::vector<ProcessUsage> usage;
  const std::string path = registryDirectory();
  const int directory = openDirectory(path, false);
  if (directory < 0) return usage;  // nobody has registered yet
  DIR* listing = fdopendir(directory);
  if (listing == nullptr) {
    close(directory);
    fail(orErrorNotPermitted, "cannot list the OpenReg registry directory ", path, ": ",
         std::strerror(errno));
  }
  const uint64_t pidNamespace = ownPidNamespace();
  const uint64_t now = monotonicNanoseconds();
  while (const dirent* entry = readdir(listing)) {
    readRecordFile(dirfd(listing), entry->d_name, pidNamespace, now, usage);
  }
  closedir(listing);
  std::sort(usage.begin(), usage.end(), [](const ProcessUsage& a, const ProcessUsage& b) {
    return a.device != b.device ? a.device < b.device : a.pid < b.pid;
  });
  return usage;
}

}  // namespace openreg::runtime
