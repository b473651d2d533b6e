"""Sharing device memory and events between processes (openreg.h, "Interprocess communication").

In-process cases import this process's own exports (a second mapping of the same
bytes, as another process would get); cross-process cases run peers spawned with
``multiprocessing`` (``_ipc_peers.py``), to which handles travel with their file
descriptors. Every wait on a peer has a deadline.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from collections.abc import Iterator

import _ipc_peers
import pytest
from _c_programs import CHECK_MACRO, build_c_program

import openreg_runtime as rt

DEADLINE = _ipc_peers.DEADLINE
PAGE = os.sysconf("SC_PAGESIZE")


@pytest.fixture
def spawn():
    """Factory: ``process, connection = spawn(target, *args)``; peers are killed afterwards."""
    context = multiprocessing.get_context("spawn")
    started: list[multiprocessing.process.BaseProcess] = []

    def start(target, *args):
        here, there = context.Pipe()
        process = context.Process(target=target, args=(there, *args), daemon=True)
        process.start()
        there.close()
        started.append(process)
        return process, here

    yield start
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(DEADLINE)


def host_address(buffer: bytearray) -> int:
    """The address of a host buffer, for raw copies."""
    return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))


def receive(connection):
    assert connection.poll(DEADLINE), "the peer sent nothing within the deadline"
    return connection.recv()


@pytest.fixture
def shared() -> Iterator[tuple[rt.DeviceBuffer, rt.IpcMemHandle]]:
    """A 3-page buffer of 0x00..0xff repeated, and a handle of all of it."""
    buffer = rt.DeviceBuffer(3 * PAGE)
    buffer.copy_from(bytes(range(256)) * (3 * PAGE // 256))
    handle = rt.ipc_get_mem_handle(buffer.ptr)
    yield buffer, handle
    handle.close()


# ---- Memory: one process's own exports ---------------------------------------


def test_an_import_is_a_second_mapping_of_the_same_bytes(shared) -> None:
    buffer, handle = shared
    pointer = rt.ipc_open_mem_handle(handle)
    try:
        assert pointer != buffer.ptr
        out = bytearray(16)
        rt.memcpy(host_address(out), pointer + 250, 16, rt.MemcpyKind.DEVICE_TO_HOST)
        assert bytes(out) == bytes([250, 251, 252, 253, 254, 255, *range(10)])
        rt.memset(pointer + PAGE, 0xEE, 4)  # written through the import, seen through the buffer
        assert buffer.to_bytes(PAGE, 5) == b"\xee" * 4 + bytes([(PAGE + 4) % 256])
    finally:
        rt.ipc_close_mem_handle(pointer)


def test_imported_memory_is_device_memory_of_the_same_device(shared) -> None:
    buffer, handle = shared
    pointer = rt.ipc_open_mem_handle(handle)
    try:
        attributes = rt.pointer_attributes(pointer + 100)
        assert attributes.type == rt.MemoryType.DEVICE
        assert attributes.device == buffer.device == handle.device
        assert attributes.allocation_base == pointer
        assert attributes.allocation_size == handle.size == 3 * PAGE
        # Copies are range-checked against the import like against an allocation.
        with pytest.raises(rt.InvalidValueError, match="overruns"):
            rt.memset(pointer + PAGE, 0, 3 * PAGE)
        # Device to device through both mappings (the kernel view is a constant offset).
        target = rt.DeviceBuffer(8)
        rt.memcpy(target.ptr, pointer + 8, 8, rt.MemcpyKind.DEVICE_TO_DEVICE)
        assert target.to_bytes() == bytes(range(8, 16))
    finally:
        rt.ipc_close_mem_handle(pointer)


def test_a_range_handle_maps_the_range_at_any_offset(shared) -> None:
    buffer, _ = shared
    with rt.ipc_get_mem_handle(buffer.ptr + PAGE + 100, 300) as handle:
        assert (handle.offset % PAGE, handle.size) == (100, 300)
        pointer = rt.ipc_open_mem_handle(handle)
    try:
        assert rt.pointer_attributes(pointer).allocation_size == 300
        out = bytearray(4)
        rt.memcpy(host_address(out), pointer, 4, rt.MemcpyKind.DEVICE_TO_HOST)
        assert bytes(out) == bytes([(PAGE + 100 + i) % 256 for i in range(4)])
        with pytest.raises(rt.InvalidValueError, match="overruns"):
            rt.memcpy(host_address(bytearray(301)), pointer, 301, rt.MemcpyKind.DEVICE_TO_HOST)
    finally:
        rt.ipc_close_mem_handle(pointer)


def test_opening_a_range_twice_gives_one_mapping_closed_twice(shared) -> None:
    _, handle = shared
    first = rt.ipc_open_mem_handle(handle)
    second = rt.ipc_open_mem_handle(handle)
    assert first == second
    rt.ipc_close_mem_handle(first)
    assert rt.pointer_attributes(first).type == rt.MemoryType.DEVICE  # still open once
    rt.ipc_close_mem_handle(first)
    with pytest.raises(rt.InvalidDevicePointerError, match="not in a live allocation"):
        rt.pointer_attributes(first)
    with pytest.raises(rt.InvalidDevicePointerError, match="closed already"):
        rt.ipc_close_mem_handle(first)


def test_a_handle_and_an_import_each_hold_the_range(shared) -> None:
    buffer, handle = shared
    assert not rt.ipc_mem_query(buffer.ptr)  # the handle's descriptor is open
    pointer = rt.ipc_open_mem_handle(handle)
    handle.close()
    assert not rt.ipc_mem_query(buffer.ptr)  # the import's mapping holds it now
    assert rt.ipc_mem_query(buffer.ptr + 2 * PAGE, 10) is False
    rt.ipc_close_mem_handle(pointer)
    rt.synchronize()
    assert rt.ipc_mem_query(buffer.ptr)


def test_a_lease_covers_its_range_only() -> None:
    buffer = rt.DeviceBuffer(4 * PAGE)
    with rt.ipc_get_mem_handle(buffer.ptr + PAGE, PAGE):
        assert not rt.ipc_mem_query(buffer.ptr + PAGE, 1)
        assert not rt.ipc_mem_query(buffer.ptr)  # the whole allocation includes it
        assert rt.ipc_mem_query(buffer.ptr, PAGE)
        assert rt.ipc_mem_query(buffer.ptr + 2 * PAGE, 2 * PAGE)
    assert rt.ipc_mem_query(buffer.ptr)


def test_memory_freed_while_imported_is_kept_until_the_import_goes() -> None:
    pointer = rt.malloc(64 * PAGE)
    rt.memset(pointer, 0x42, 64 * PAGE)
    handle = rt.ipc_get_mem_handle(pointer)
    imported = rt.ipc_open_mem_handle(handle)
    handle.close()
    free_before, _ = rt.mem_get_info()
    rt.free(pointer)
    rt.synchronize()
    assert rt.mem_get_info()[0] == free_before  # held: another mapping uses it
    assert rt.DeviceBuffer(PAGE).ptr != pointer  # and not handed out again
    out = bytearray(4)
    rt.memcpy(host_address(out), imported + 63 * PAGE, 4, rt.MemcpyKind.DEVICE_TO_HOST)
    assert bytes(out) == b"\x42" * 4  # the bytes did not change (no hole was punched)
    rt.ipc_close_mem_handle(imported)
    rt.synchronize()
    assert rt.mem_get_info()[0] == free_before + 64 * PAGE


def test_a_reexported_import_names_the_same_bytes(shared) -> None:
    buffer, handle = shared
    pointer = rt.ipc_open_mem_handle(handle)
    try:
        with rt.ipc_get_mem_handle(pointer + 10, 20) as again:
            assert (again.memory_id, again.device) == (handle.memory_id, handle.device)
            assert again.offset == handle.offset + 10 and again.size == 20
            assert not rt.ipc_mem_query(buffer.ptr + 15, 1)  # leased by the new handle
    finally:
        rt.ipc_close_mem_handle(pointer)


# ---- Memory: refusals ----------------------------------------------------------


def test_bad_arguments_name_the_problem(shared, tmp_path) -> None:
    buffer, handle = shared
    with pytest.raises(rt.InvalidValueError, match="pass its start, or use orIpcGetMemRangeHandle"):
        rt.ipc_get_mem_handle(buffer.ptr + 8)
    with pytest.raises(rt.InvalidValueError, match="overruns its 12288-byte allocation"):
        rt.ipc_get_mem_handle(buffer.ptr + 8, 3 * PAGE)
    with pytest.raises(rt.InvalidValueError, match="at least 1 byte"):
        rt.ipc_get_mem_handle(buffer.ptr, 0)
    with pytest.raises(rt.InvalidDevicePointerError, match="not OpenReg device memory"):
        rt.ipc_get_mem_handle(host_address(bytearray(8)))
    with pytest.raises(rt.InvalidDevicePointerError, match="not an import; free it with orFree"):
        rt.ipc_close_mem_handle(buffer.ptr)
    pointer = rt.ipc_open_mem_handle(handle)
    with pytest.raises(rt.InvalidDevicePointerError, match="release it with orIpcCloseMemHandle"):
        rt.free(pointer)
    with pytest.raises(rt.InvalidDevicePointerError, match="points inside an import"):
        rt.ipc_close_mem_handle(pointer + 1)
    rt.ipc_close_mem_handle(pointer)
    # A descriptor of something else, or a handle whose fields lie.
    path = tmp_path / "not-device-memory"
    path.write_bytes(b"x" * PAGE)
    descriptor = os.open(path, os.O_RDWR)
    with rt.IpcMemHandle(descriptor, 0, handle.memory_id, 0, PAGE, os.getpid()) as forged:
        with pytest.raises(rt.InvalidValueError, match="not a descriptor of OpenReg device memory"):
            rt.ipc_open_mem_handle(forged)
    beyond = rt.IpcMemHandle(os.dup(handle.fd), handle.device, handle.memory_id, 2**50, 8, 0)
    with beyond, pytest.raises(rt.InvalidValueError, match="not inside the exporter's"):
        rt.ipc_open_mem_handle(beyond)
    handle.close()
    with pytest.raises(ValueError, match="closed"):
        rt.ipc_open_mem_handle(handle)


# ---- Events: one process's own ---------------------------------------------------


def test_interprocess_events_cannot_time_and_ordinary_ones_cannot_be_shared() -> None:
    with pytest.raises(rt.InvalidValueError, match="interprocess event cannot time"):
        rt.Event(enable_timing=True, interprocess=True)
    with pytest.raises(rt.InvalidHandleError, match="not created with orEventInterprocess"):
        rt.Event().ipc_handle()
    with pytest.raises(TypeError, match="expects an IpcEventHandle"):
        rt.Event.from_ipc_handle(object())


def test_an_imported_event_follows_the_exporters_records(hold_stream) -> None:
    stream = rt.Stream()
    release = hold_stream(stream)
    event = rt.Event(interprocess=True)
    event.record(stream)
    with event.ipc_handle() as handle:
        imported = rt.Event.from_ipc_handle(handle)
    assert not imported.query()
    with pytest.raises(rt.NotPermittedError, match="record it in the process that created it"):
        imported.record()
    waiter = rt.Stream()
    waiter.wait_event(imported)
    marker = rt.Event()
    marker.record(waiter)
    assert not marker.query()  # the waiter waits for the held record
    release()
    marker.synchronize()
    assert imported.query() and event.query()
    imported.synchronize()


def test_records_on_two_streams_complete_in_record_order(hold_stream) -> None:
    slow, fast = rt.Stream(), rt.Stream()
    release = hold_stream(slow)
    event = rt.Event(interprocess=True)
    event.record(slow)
    with event.ipc_handle() as handle:
        imported = rt.Event.from_ipc_handle(handle)
    event.record(fast)  # the second record waits for the first one
    assert not imported.query()
    assert not fast.query()
    release()
    imported.synchronize()
    fast.synchronize()


def test_an_event_destroyed_by_its_exporter_stays_complete_for_importers() -> None:
    event = rt.Event(interprocess=True)
    event.record()
    with event.ipc_handle() as handle:
        imported = rt.Event.from_ipc_handle(handle)
    event.synchronize()
    del event
    reused = rt.Event(interprocess=True)  # may take the same slot
    with reused.ipc_handle() as again:
        assert again.slot != handle.slot or again.epoch != handle.epoch
    assert imported.query()
    rt.Stream().wait_event(imported)
    imported.synchronize()


# ---- Across processes ----------------------------------------------------------------


def test_memory_round_trip_with_a_spawned_process(spawn) -> None:
    process, connection = spawn(_ipc_peers.export_pattern, 2 * PAGE, 0x33)
    handle = receive(connection)
    assert handle.exporter_pid == process.pid and handle.size == 2 * PAGE
    pointer = rt.ipc_open_mem_handle(handle)
    handle.close()
    out = bytearray(2 * PAGE)
    rt.memcpy(host_address(out), pointer, 2 * PAGE, rt.MemcpyKind.DEVICE_TO_HOST)
    assert bytes(out) == b"\x33" * (2 * PAGE)
    rt.memset(pointer, 0x44, 8)  # synchronous: complete before the peer reads
    connection.send("written")
    assert receive(connection) == b"\x44" * 8 + b"\x33" * 8
    connection.send("exit")
    process.join(DEADLINE)
    assert process.exitcode == 0
    # The exporter has exited: the import keeps its bytes, and closes cleanly.
    rt.memcpy(host_address(out), pointer, 16, rt.MemcpyKind.DEVICE_TO_HOST)
    assert bytes(out[:16]) == b"\x44" * 8 + b"\x33" * 8
    rt.ipc_close_mem_handle(pointer)


def test_memory_exported_to_a_spawned_process(spawn) -> None:
    buffer = rt.DeviceBuffer(PAGE)
    buffer.fill(0)
    process, connection = spawn(_ipc_peers.import_and_write, 0x6B)
    with rt.ipc_get_mem_handle(buffer.ptr) as handle:
        connection.send(handle)
    assert receive(connection) == ("imported", process.pid)
    assert buffer.to_bytes(0, 4) == b"\x6b" * 4  # written by the peer, synchronously
    assert not rt.ipc_mem_query(buffer.ptr)
    connection.send("close")
    assert receive(connection) == "closed"
    assert rt.ipc_mem_query(buffer.ptr)  # the peer let go
    connection.send("exit")


def test_an_importer_killed_while_holding_memory_lets_go(spawn) -> None:
    pointer = rt.malloc(16 * PAGE)
    process, connection = spawn(_ipc_peers.import_and_hold)
    with rt.ipc_get_mem_handle(pointer) as handle:
        connection.send(handle)
    assert receive(connection) == ("imported", process.pid)
    free_before, _ = rt.mem_get_info()
    rt.free(pointer)
    rt.synchronize()
    assert rt.mem_get_info()[0] == free_before  # held for the peer
    os.kill(process.pid, signal.SIGKILL)
    process.join(DEADLINE)
    assert rt.mem_get_info()[0] == free_before + 16 * PAGE  # released: the kernel dropped its lease


def test_an_exporter_killed_while_its_memory_is_imported(spawn) -> None:
    process, connection = spawn(_ipc_peers.export_and_linger, 8 * PAGE)
    handle, pid = receive(connection)
    pointer = rt.ipc_open_mem_handle(handle)
    handle.close()
    os.kill(pid, signal.SIGKILL)
    process.join(DEADLINE)
    out = bytearray(8)
    rt.memcpy(host_address(out), pointer + 7 * PAGE, 8, rt.MemcpyKind.DEVICE_TO_HOST)
    assert bytes(out) == b"\x5a" * 8
    rt.ipc_close_mem_handle(pointer)
    rt.synchronize()


def test_an_event_orders_a_write_in_one_process_before_a_read_in_another(spawn) -> None:
    process, connection = spawn(_ipc_peers.record_behind_held_work, PAGE)
    memory, shared = receive(connection)
    pointer = rt.ipc_open_mem_handle(memory)
    event = rt.Event.from_ipc_handle(shared)
    memory.close()
    shared.close()
    assert not event.query()  # the peer's fill is held
    stream = rt.Stream()
    stream.wait_event(event)
    result = rt.HostBuffer(4)
    rt.memcpy_async(result.ptr, pointer, 4, rt.MemcpyKind.DEVICE_TO_HOST, stream)
    connection.send("release")
    stream.synchronize()
    assert bytes(memoryview(result)) == b"\x77" * 4  # the copy ran after the peer's fill
    connection.send("exit")
    process.join(DEADLINE)
    rt.ipc_close_mem_handle(pointer)


def test_waiting_for_a_record_of_a_process_that_died_fails_instead_of_hanging(spawn) -> None:
    process, connection = spawn(_ipc_peers.record_behind_held_work, PAGE)
    memory, shared = receive(connection)
    memory.close()
    event = rt.Event.from_ipc_handle(shared)
    shared.close()
    stream = rt.Stream()
    stream.wait_event(event)
    connection.send("die")
    process.join(DEADLINE)
    assert process.exitcode == 3
    with pytest.raises(rt.LaunchFailureError, match=rf"pid {process.pid}\) exited before record"):
        stream.synchronize()
    with pytest.raises(rt.LaunchFailureError, match="exited before record"):
        event.synchronize()
    with pytest.raises(rt.LaunchFailureError, match="exited before record"):
        event.query()


# ---- From C -------------------------------------------------------------------------

C_PEERS = (
    r"""
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "openreg.h"

"""
    + CHECK_MACRO
    + r"""
/* A handle is its bytes plus its descriptor, which travels as SCM_RIGHTS. */
static int send_handle(int socket, int fd, const void* bytes, size_t length) {
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec data = {(void*)bytes, length};
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  struct cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(header), &fd, sizeof(int));
  return sendmsg(socket, &message, 0) == (ssize_t)length ? 0 : -1;
}

static int receive_handle(int socket, void* bytes, size_t length) {
  char control[CMSG_SPACE(sizeof(int))];
  struct iovec data = {bytes, length};
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  if (recvmsg(socket, &message, MSG_WAITALL) != (ssize_t)length) return -1;
  int fd = -1;
  memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&message)), sizeof(int));
  return fd;
}

static int exporter(int socket) {
  void* memory = NULL;
  CHECK(orMalloc(&memory, 4096));
  CHECK(orMemset(memory, 0x5c, 4096));
  orEvent_t event = NULL;
  CHECK(orEventCreateWithFlags(&event, orEventInterprocess | orEventDisableTiming));
  CHECK(orEventRecord(event, NULL));
  orIpcMemHandle_t memory_handle;
  orIpcEventHandle_t event_handle;
  CHECK(orIpcGetMemHandle(&memory_handle, memory));
  CHECK(orIpcGetEventHandle(&event_handle, event));
  if (send_handle(socket, memory_handle.fd, &memory_handle, sizeof memory_handle) != 0 ||
      send_handle(socket, event_handle.fd, &event_handle, sizeof event_handle) != 0) {
    return 1;
  }
  close(memory_handle.fd);
  close(event_handle.fd);
  char written = 0;
  if (read(socket, &written, 1) != 1) return 1;
  unsigned char host[4];
  CHECK(orMemcpy(host, memory, 4, orMemcpyDeviceToHost));
  if (host[0] != 0x21 || host[3] != 0x21) return 2;
  CHECK(orEventDestroy(event));
  CHECK(orFree(memory));
  return 0;
}

int main(void) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return 1;
  pid_t child = fork(); /* before any device use: both processes may use the runtime */
  if (child == 0) _exit(exporter(pair[1]));

  orIpcMemHandle_t memory_handle;
  orIpcEventHandle_t event_handle;
  memory_handle.fd = receive_handle(pair[0], &memory_handle, sizeof memory_handle);
  event_handle.fd = receive_handle(pair[0], &event_handle, sizeof event_handle);
  if (memory_handle.fd < 0 || event_handle.fd < 0) return 1;
  void* imported = NULL;
  orEvent_t event = NULL;
  CHECK(orIpcOpenMemHandle(&imported, memory_handle, 0));
  CHECK(orIpcOpenEventHandle(&event, event_handle));
  close(memory_handle.fd);
  close(event_handle.fd);
  CHECK(orStreamWaitEvent(NULL, event, 0));
  unsigned char host[4];
  CHECK(orMemcpy(host, imported, 4, orMemcpyDeviceToHost));
  if (host[0] != 0x5c) return 3;
  CHECK(orMemset(imported, 0x21, 4));
  if (write(pair[0], "w", 1) != 1) return 1;
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(orIpcCloseMemHandle(imported));
  CHECK(orEventDestroy(event));
  printf("exporter status %d, imported %zu bytes\n", status, (size_t)memory_handle.size);
  return 0;
}
"""
)


def test_the_ipc_api_from_c_with_descriptors_passed_over_a_socket(tmp_path, clean_env) -> None:
    import subprocess

    executable = build_c_program(C_PEERS, tmp_path, "ipc_peers", "-D_GNU_SOURCE")
    run = subprocess.run(
        [str(executable)], env=clean_env(), capture_output=True, text=True, timeout=DEADLINE
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "exporter status 0, imported 4096 bytes"
