// ipc_lease.h — leases on ranges of a shared memory file, kept by the kernel.
//
// A process that exports a range of device memory must not reuse it while
// another process maps it, and must learn when that process lets go — also
// when it dies without a word (SIGKILL). Open-file-description locks
// (F_OFD_SETLK) give exactly that: a lease is a shared (read) lock on the
// range, taken on a fresh open file description of the file. The lock lives
// as long as that description does: while any descriptor refers to it (the
// handle's descriptor in the exporter, its copy in flight through a socket,
// the receiver's) or any mapping made through it (the importer's views), and
// the kernel drops it when the last of them goes, process death included.
// The exporter asks whether any lease remains with F_OFD_GETLK from a
// description of its own, which its own locks never conflict with.
//
// Interprocess events use the same mechanism the other way round: the
// exporter holds an exclusive (write) lock on one byte of the event's slot
// while the event lives, and a waiter that finds no such lock knows the
// exporter is gone.
#pragma once

#include <cstddef>
#include <string>

#include <sys/types.h>

namespace openreg::runtime {

// A new open file description of the file behind `fd` (O_RDWR, close-on-exec),
// through /proc/self/fd. Throws ApiError on failure.
int reopenFile(int fd);
// reopenFile(fd), with a shared lock on [offset, offset + length): a lease.
int leaseRange(int fd, size_t offset, size_t length);
// Whether a description other than `fd`'s holds a lock of `type` (F_RDLCK:
// a lease; F_WRLCK: an exporter's liveness lock) conflicting with a lock of
// the other type on the range.
bool rangeLockedByOthers(int fd, size_t offset, size_t length, short heldType);
// Takes (F_WRLCK) or drops (F_UNLCK) a lock on the range through `fd`'s description.
void setRangeLock(int fd, size_t offset, size_t length, short type);
// What `fd` refers to, as /proc/self/fd shows it ("/memfd:openreg-device-0 (deleted)").
std::string fileDescription(int fd);

}  // namespace openreg::runtime
