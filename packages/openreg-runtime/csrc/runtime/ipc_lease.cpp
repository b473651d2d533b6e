// ipc_lease.cpp — open file description locks and /proc/self/fd reopening.
#include "ipc_lease.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "errors.h"

namespace openreg::runtime {
namespace {

struct flock rangeLock(short type, size_t offset, size_t length) {
  struct flock lock;
  std::memset(&lock, 0, sizeof(lock));
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(offset);
  lock.l_len = static_cast<off_t>(length);
  return lock;
}

}  // namespace

std::string fileDescription(int fd) {
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  char target[PATH_MAX];
  const ssize_t length = readlink(link, target, sizeof(target) - 1);
  if (length < 0) return "";
  return std::string(target, static_cast<size_t>(length));
}

int reopenFile(int fd) {
  char link[64];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const int reopened = open(link, O_RDWR | O_CLOEXEC);
  if (reopened < 0) {
    fail(orErrorUnknown, "cannot open a new description of file descriptor ", fd, " through ", link,
         ": ", std::strerror(errno), " (OpenReg IPC needs /proc mounted)");
  }
  return reopened;
}

int leaseRange(int fd, size_t offset, size_t length) {
  const int lease = reopenFile(fd);
  struct flock lock = rangeLock(F_RDLCK, offset, length);
  if (fcntl(lease, F_OFD_SETLK, &lock) != 0) {
    const int error = errno;
    close(lease);
    fail(orErrorUnknown, "cannot take a lease on ", length,
         " bytes of shared memory: ", std::strerror(error));
  }
  return lease;
}

bool rangeLockedByOthers(int fd, size_t offset, size_t length, short heldType) {
  // A probe for the type that conflicts with `heldType`: a write lock
  // conflicts with any lock, a read lock only with write locks.
  struct flock probe = rangeLock(heldType == F_RDLCK ? F_WRLCK : F_RDLCK, offset, length);
  if (fcntl(fd, F_OFD_GETLK, &probe) != 0) {
    fail(orErrorUnknown, "cannot query locks on shared memory: ", std::strerror(errno));
  }
  return probe.l_type != F_UNLCK;
}

void setRangeLock(int fd, size_t offset, size_t length, short type) {
  struct flock lock = rangeLock(type, offset, length);
  if (fcntl(fd, F_OFD_SETLK, &lock) != 0) {
    fail(orErrorUnknown, "cannot lock shared memory: ", std::strerror(errno));
  }
}

}  // namespace openreg::runtime
