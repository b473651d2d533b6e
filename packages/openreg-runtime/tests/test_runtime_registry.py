"""The process registry behind openreg-smi: several live processes, crashes, pid reuse, privacy.

Every test uses its own registry directory (OPENREG_REGISTRY_DIR), so processes of
other test runs on the machine never show up in its listings.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import clean_environment

import openreg_runtime as rt

PAGE = os.sysconf("SC_PAGESIZE")

# A process using devices: allocates per "device:bytes" argument, optionally keeps
# device 0 busy inside a kernel ("hold"), then obeys commands read from stdin.
CHILD = r"""
import sys, threading
import openreg_runtime as rt

buffers = []
for spec in sys.argv[1:]:
    if spec == "hold":
        running, release = threading.Event(), threading.Event()
        def kernel():
            running.set()
            release.wait(120)
        stream = rt.Stream(device=0)
        stream.launch(kernel)
        running.wait(60)
        continue
    device, size = map(int, spec.split(":"))
    buffers.append(rt.DeviceBuffer(size, device=device))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "release":
        release.set()
        stream.synchronize()
        print("released", flush=True)
    elif line.strip() == "exit":
        break
"""


class Child:
    """A process using devices, driven through its stdin."""

    def __init__(self, registry: Path, *specs: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, *specs],
            env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.process.pid
        self.expect("ready")

    def expect(self, word: str) -> None:
        line = self.process.stdout.readline().strip()
        assert line == word, f"child {self.pid} said {line!r}, expected {word!r}"

    def send(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def exit(self) -> None:
        self.send("exit")
        assert self.process.wait(60) == 0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(60)


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A private registry directory, used by this process's listings and by children."""
    directory = tmp_path / "registry"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("OPENREG_REGISTRY_DIR", str(directory))
    return directory


@pytest.fixture
def children(registry):
    started: list[Child] = []

    def start(*specs: str) -> Child:
        child = Child(registry, *specs)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


def usage_by_pid() -> dict[tuple[int, int], rt.ProcessUsage]:
    return {(u.pid, u.device): u for u in rt.process_usage()}


def test_several_live_processes_are_listed_with_their_memory(children, registry):
    first = children("0:1000000", "1:5000")
    second = children("0:3000", "0:70000")
    third = children("1:1")
    usage = usage_by_pid()
    assert set(usage) == {
        (first.pid, 0), (first.pid, 1), (second.pid, 0), (third.pid, 1),
    }  # fmt: skip
    assert usage[first.pid, 0].bytes_in_use == _page_round(1000000)
    assert usage[first.pid, 1].bytes_in_use == _page_round(5000)
    assert usage[second.pid, 0].bytes_in_use == _page_round(3000) + _page_round(70000)
    assert usage[third.pid, 1].bytes_in_use == PAGE
    for entry in usage.values():
        assert entry.name.startswith("python")
        assert entry.capacity == rt.device_total_memory(entry.device)
        assert entry.start_time > 0
    ordered = [(u.device, u.pid) for u in rt.process_usage()]
    assert ordered == sorted(ordered)
    # One file per process, private to the user.
    files = sorted(registry.iterdir())
    assert len(files) == 3
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in files)
    for child in (first, second, third):
        child.exit()
    assert rt.process_usage() == []
    assert list(registry.iterdir()) == [], "a process that exits removes its own record"


def test_a_killed_process_is_pruned_by_the_next_reader(children, registry):
    survivor = children("0:8192")
    victim = children("0:4096", "1:4096")
    assert {u.pid for u in rt.process_usage()} == {survivor.pid, victim.pid}
    os.kill(victim.pid, signal.SIGKILL)
    victim.process.wait(60)
    assert len(list(registry.iterdir())) == 2, "a killed process cannot remove its record"
    usage = rt.process_usage()
    assert [(u.pid, u.device, u.bytes_in_use) for u in usage] == [(survivor.pid, 0, 8192)]
    assert [path.name.split("-")[1] for path in registry.iterdir()] == [str(survivor.pid)]


def _copy_record_as(source: Path, pid: int, start_time: int) -> Path:
    """A record file claiming another process identity (as a crashed process would leave)."""
    data = bytearray(source.read_bytes())
    data[12:16] = pid.to_bytes(4, sys.byteorder)  # RegistryFile.pid
    data[16:24] = start_time.to_bytes(8, sys.byteorder)  # RegistryFile.startTime
    target = source.parent / f"proc-{pid}-{start_time}"
    target.write_bytes(bytes(data))
    target.chmod(0o600)
    return target


def test_a_reused_pid_is_not_mistaken_for_the_old_process(children, registry):
    child = children("0:4096")
    (record,) = registry.iterdir()
    start_time = int(record.name.split("-")[2])
    # The same pid with an earlier start time: that process died and the pid was reused.
    reused = _copy_record_as(record, child.pid, start_time - 1)
    # A pid that no longer exists at all.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = _copy_record_as(record, int(gone.stdout), start_time)
    assert [u.pid for u in rt.process_usage()] == [child.pid]
    assert not reused.exists() and not dead.exists()
    assert record.exists()


def test_utilization_follows_work_on_the_device(children):
    busy = children("hold", "1:4096")
    idle = children("0:4096")
    # The kernel has been running since before this point: wait one window so the
    # whole window is busy (a longer wait, on a loaded machine, changes nothing).
    time.sleep(rt.UTILIZATION_WINDOW_MS / 1000 * 1.3)
    usage = usage_by_pid()
    assert usage[busy.pid, 0].utilization >= 90
    assert usage[busy.pid, 1].utilization == 0, "no work ran on device 1"
    assert usage[idle.pid, 0].utilization == 0
    assert rt.utilization(0) == usage[busy.pid, 0].utilization
    busy.send("release")
    busy.expect("released")
    time.sleep(rt.UTILIZATION_WINDOW_MS / 1000 * 1.3)
    assert usage_by_pid()[busy.pid, 0].utilization == 0, "idle for a whole window"
    assert rt.utilization(0) == 0


def test_utilization_checks_the_device_index():
    with pytest.raises(rt.InvalidDeviceError, match="out of range"):
        rt.utilization(rt.device_count())


def test_listing_never_registers_the_reader(registry, run_python):
    result = run_python(
        """
        import json, os, openreg_runtime as rt
        print(json.dumps([rt.process_usage() == [], rt.device_total_memory(1) > 0,
                          os.listdir(os.environ["OPENREG_REGISTRY_DIR"])]))
        """,
        env={"OPENREG_REGISTRY_DIR": str(registry)},
    )
    assert result.json() == [True, True, []]


def test_the_directory_is_created_private(tmp_path, run_python):
    directory = tmp_path / "new" / "registry"
    directory.parent.mkdir()
    result = run_python(
        """
        import json, os, openreg_runtime as rt
        rt.malloc(4096)
        print(json.dumps([u.pid == os.getpid() for u in rt.process_usage()]))
        """,
        env={"OPENREG_REGISTRY_DIR": str(directory)},
    )
    assert result.json() == [True]
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
def test_a_directory_others_can_enter_is_refused(tmp_path, run_python, mode):
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    # Devices still work, but nothing is published there...
    result = run_python(
        """
        import json, os, openreg_runtime as rt
        buffer = rt.DeviceBuffer(4096)
        print(json.dumps(os.listdir(os.environ["OPENREG_REGISTRY_DIR"])))
        """,
        env={"OPENREG_REGISTRY_DIR": str(directory)},
    )
    assert result.json() == []
    # ...and a reader says why, and what to do.
    os.environ["OPENREG_REGISTRY_DIR"] = str(directory)
    try:
        with pytest.raises(rt.NotPermittedError, match=r"mode 0700.*it has uid \d+ and mode 0"):
            rt.process_usage()
    finally:
        del os.environ["OPENREG_REGISTRY_DIR"]


def test_a_symbolic_link_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    monkeypatch.setenv("OPENREG_REGISTRY_DIR", str(link))
    with pytest.raises(rt.NotPermittedError, match="not a symbolic link"):
        rt.process_usage()


def test_a_relative_directory_is_refused(monkeypatch):
    monkeypatch.setenv("OPENREG_REGISTRY_DIR", "relative/dir")
    with pytest.raises(rt.NotPermittedError, match="absolute directory path"):
        rt.process_usage()


def test_a_missing_directory_means_no_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENREG_REGISTRY_DIR", str(tmp_path / "absent"))
    assert rt.process_usage() == []


def test_a_forked_child_leaves_the_parents_record(registry, run_python):
    result = run_python(
        """
        import json, os, sys, openreg_runtime as rt
        buffer = rt.DeviceBuffer(4096)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # runs exit handlers in the child
        os.waitpid(pid, 0)
        print(json.dumps([(u.pid == os.getpid(), u.bytes_in_use) for u in rt.process_usage()]))
        """,
        env={"OPENREG_REGISTRY_DIR": str(registry)},
    )
    assert result.json() == [[True, 4096]]


# ---- openreg-smi ---------------------------------------------------------------


def smi(*args: str, registry: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openreg_runtime.smi", *args],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_smi_json_lists_devices_and_processes(children, registry):
    first = children("0:1048576")
    second = children("0:4096", "1:8192")
    result = smi("--json", registry=registry)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["registry"] == str(registry)
    assert state["utilization_window_ms"] == rt.UTILIZATION_WINDOW_MS
    devices = state["devices"]
    assert [d["index"] for d in devices] == [0, 1]
    assert devices[0]["memory_used"] == 1048576 + 4096
    assert devices[1]["memory_used"] == 8192
    assert devices[0]["capacity"] == rt.device_total_memory(0)
    assert [(p["pid"], p["memory_used"]) for p in devices[0]["processes"]] == sorted(
        [(first.pid, 1048576), (second.pid, 4096)]
    )
    assert [p["pid"] for p in devices[1]["processes"]] == [second.pid]


def test_smi_table_shows_each_process(children, registry):
    child = children("1:2097152")
    result = smi(registry=registry)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("openreg-smi")
    device_rows = [line.split() for line in lines[3:5]]
    assert device_rows[0][:4] == ["0", "0", "B", "/"] and device_rows[0][-1] == "0"
    assert device_rows[1][:3] == ["1", "2.00", "MiB"] and device_rows[1][-1] == "1"
    (row,) = [line.split() for line in lines if line.split()[1:2] == [str(child.pid)]]
    assert row[0] == "1" and row[3:5] == ["2.00", "MiB"]


def test_smi_without_processes(registry):
    result = smi(registry=registry)
    assert result.returncode == 0, result.stderr
    assert "no process is using an OpenReg device" in result.stdout


# openreg-smi with Ctrl-C (SIGINT) raising KeyboardInterrupt whatever this process
# inherited: a test runner started in the background by a non-interactive shell
# ignores SIGINT (POSIX), its children inherit that, and Python then leaves SIGINT
# ignored, so the loop would never see the interrupt the test sends.
SMI_WITH_CTRL_C = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from openreg_runtime.smi import main; sys.exit(main(sys.argv[1:]))"
)


def test_smi_loop_refreshes_until_interrupted(children, registry):
    child = children("0:4096")
    process = subprocess.Popen(
        [sys.executable, "-c", SMI_WITH_CTRL_C, "--json", "-l", "0.1"],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = json.loads(process.stdout.readline())
        child.exit()  # returns once the child has exited: later reports must not show it
        # Reports made before that may still wait in the pipe (at most its 64 KiB).
        later = []
        while len(later) < 1000 and (not later or later[-1]["devices"][0]["processes"]):
            later.append(json.loads(process.stdout.readline()))
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert [(p["pid"], p["memory_used"]) for p in first["devices"][0]["processes"]] == [
        (child.pid, 4096)
    ]
    # (while exiting, the child may have freed its memory before removing its record)
    assert all([p["pid"] for p in d["devices"][0]["processes"]] == [child.pid] for d in later[:-1])
    assert later[-1]["devices"][0]["processes"] == []
    assert later[-1]["devices"][0]["memory_used"] == 0


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan", "1e308", "86400.5", "1e10"])
def test_smi_rejects_a_bad_interval(registry, value):
    result = smi("-l", value, registry=registry)
    assert result.returncode == 2, result.stderr  # argparse's usage error, not a traceback
    assert "Traceback" not in result.stderr
    assert f"argument -l/--loop: {value!r} is not a refresh interval" in result.stderr
    assert "seconds more than 0 and at most 86400 (a day)" in result.stderr


def test_smi_reports_an_unsafe_directory(tmp_path):
    directory = tmp_path / "open"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    result = smi(registry=directory)
    assert result.returncode == 1
    assert result.stderr.startswith("openreg-smi: the OpenReg registry directory")


def test_smi_console_script_is_installed(registry):
    script = shutil.which("openreg-smi", path=str(Path(sys.executable).parent))
    assert script is not None, "openreg-smi is not installed next to the interpreter"
    result = subprocess.run(
        [script, "--json"],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["devices"][0]["processes"] == []


# ---- C API -----------------------------------------------------------------------

C_PROGRAM = textwrap.dedent(
    r"""
    #include <stdio.h>
    #include <string.h>
    #include <unistd.h>

    #include "openreg.h"

    int main(void) {
      unsigned int count = 0;
      if (orGetProcessUsage(NULL, &count) != orSuccess || count != 0) return 10;
      void* pointer = NULL;
      if (orMalloc(&pointer, 10000) != orSuccess) return 11;
      count = 0;
      if (orGetProcessUsage(NULL, &count) != orSuccess || count != 1) return 12;
      orProcessUsage entries[4];
      count = 4;
      if (orGetProcessUsage(entries, &count) != orSuccess || count != 1) return 13;
      size_t total = 0, free_bytes = 0, capacity = 0;
      if (orMemGetInfo(&free_bytes, &total) != orSuccess) return 14;
      if (orDeviceTotalMem(&capacity, 1) != orSuccess || capacity != total) return 15;
      if (orDeviceTotalMem(&capacity, 2) != orErrorInvalidDevice) return 16;
      (void)orGetLastError();
      if (orGetProcessUsage(NULL, NULL) != orErrorInvalidValue) return 17;
      count = 1;
      if (orGetProcessUsage(NULL, &count) != orErrorInvalidValue) return 18;
      printf("%d %d %d %zu %d %u %s\n", entries[0].pid == (int)getpid(), entries[0].device,
             entries[0].startTime > 0, entries[0].bytesInUse, entries[0].capacity == total,
             entries[0].utilization, strstr(orGetLastErrorMessage(), "entries") ? "ok" : "?");
      return 0;
    }
    """
)


def test_c_program_reads_the_registry(tmp_path, registry):
    compiler = shutil.which("cc")
    assert compiler is not None, "a C compiler (cc) is required to test the C API"
    source, executable = tmp_path / "usage.c", tmp_path / "usage"
    source.write_text(C_PROGRAM)
    library_dir = rt.get_library_dir()
    build = subprocess.run(
        [compiler, "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror",
         f"-I{rt.get_include()}", str(source), "-o", str(executable), f"-L{library_dir}",
         "-lopenreg", f"-Wl,-rpath,{library_dir}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    result = subprocess.run(
        [str(executable)],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "0", "1", str(_page_round(10000)), "1", "0", "ok"]


def _page_round(size: int) -> int:
    return (size + PAGE - 1) // PAGE * PAGE


def test_a_new_process_prunes_records_of_crashed_ones(children, registry, run_python):
    child = children("0:4096")
    (record,) = registry.iterdir()
    start_time = int(record.name.split("-")[2])
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = _copy_record_as(record, int(gone.stdout), start_time)
    # No reader runs: the next process that registers cleans up.
    result = run_python(
        "import openreg_runtime as rt; rt.malloc(4096); print('[]')",
        env={"OPENREG_REGISTRY_DIR": str(registry)},
    )
    assert result.json() == []
    assert not dead.exists()
    assert [path.name for path in registry.iterdir()] == [record.name]
    assert [u.pid for u in rt.process_usage()] == [child.pid]


# ---- Files the registry did not write --------------------------------------------


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(gone.stdout)


def test_a_fifo_named_like_a_record_blocks_no_reader(children, registry, run_python):
    # Opening a FIFO for reading waits for a writer: a reader that opened one
    # without O_NONBLOCK hung (openreg-smi, and every process's first device use).
    child = children("0:4096")
    fifos = [registry / "proc-1-1", registry / f".tmp-{_dead_pid()}-1"]
    for fifo in fifos:
        os.mkfifo(fifo, 0o600)
    listing = (
        "import json, openreg_runtime as rt; print(json.dumps([u.pid for u in rt.process_usage()]))"
    )
    assert run_python(listing, env={"OPENREG_REGISTRY_DIR": str(registry)}).json() == [child.pid]
    first_use = run_python(
        """
        import json, os, openreg_runtime as rt
        rt.malloc(4096)
        print(json.dumps(sorted(u.pid for u in rt.process_usage() if u.pid != os.getpid())))
        """,
        env={"OPENREG_REGISTRY_DIR": str(registry)},
    )
    assert first_use.json() == [child.pid]
    result = smi("--json", registry=registry)
    assert result.returncode == 0, result.stderr
    assert [p["pid"] for p in json.loads(result.stdout)["devices"][0]["processes"]] == [child.pid]
    # Skipped, not removed: the registry only removes files it could have written.
    assert all(stat.S_ISFIFO(fifo.lstat().st_mode) for fifo in fifos)


def _own_start_time() -> int:
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_a_record_owned_by_another_user_is_not_listed(children, registry):
    child = children("0:4096")
    (record,) = registry.iterdir()
    # A well-formed record of a live process (this one), but not written by this user.
    foreign = _copy_record_as(record, os.getpid(), _own_start_time())
    if os.geteuid() == 0:
        os.chown(foreign, os.geteuid() + 1, -1)
    else:  # only root can give a file away; a file we cannot open is skipped the same way
        foreign.chmod(0)
    assert [u.pid for u in rt.process_usage()] == [child.pid]
    assert foreign.exists(), "not ours: neither listed nor removed"


# ---- Corrupted records -----------------------------------------------------------

# RegistryFile (device_registry.h): the header, then one record per device.
NAME_OFFSET, NAME_SIZE, DEVICES_OFFSET = 32, 32, 64

# A process that keeps device 0 going busy and idle (each transition updates its
# record) until told to check itself.
CHURNING_CHILD = r"""
import sys, threading
import openreg_runtime as rt

buffer = rt.DeviceBuffer(4096, device=0)
stream = rt.Stream(device=0)
stop, started = threading.Event(), threading.Event()

def churn():
    while not stop.is_set():
        stream.launch(started.set)
        stream.synchronize()

thread = threading.Thread(target=churn)
thread.start()
started.wait(60)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "check":
        stop.set()
        thread.join()
        for _ in range(100):
            stream.launch(lambda: None)
            stream.synchronize()
        more = rt.DeviceBuffer(8192, device=0)
        print("alive", flush=True)
    elif line.strip() == "exit":
        break
"""


def _assert_sane(usage: list[rt.ProcessUsage]) -> None:
    for entry in usage:
        assert entry.capacity == rt.device_total_memory(entry.device), entry
        assert 0 <= entry.bytes_in_use <= entry.capacity and entry.bytes_in_use % PAGE == 0, entry
        assert 0 <= entry.utilization <= 100, entry
        assert isinstance(entry.name, str)


def test_a_corrupted_record_crashes_neither_its_owner_nor_a_reader(registry):
    owner = subprocess.Popen(
        [sys.executable, "-c", CHURNING_CHILD],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout.readline().strip() == "ready"
        (record,) = registry.iterdir()
        size = record.stat().st_size
        garbage = b"\xff" * (size - DEVICES_OFFSET)
        fd = os.open(record, os.O_WRONLY)
        try:
            # Every counter of every device: the sample index, the seqlock, the
            # capacity, the bytes in use, the busy times, the samples; and the name.
            os.pwrite(fd, b"\xff" * NAME_SIZE, NAME_OFFSET)
            for _ in range(200):
                os.pwrite(fd, garbage, DEVICES_OFFSET)
                _assert_sane(rt.process_usage())
            result = smi("--json", registry=registry)
            assert result.returncode == 0, result.stderr
            for device in json.loads(result.stdout)["devices"]:
                assert 0 <= device["memory_used"] <= device["capacity"], device
                assert 0 <= device["utilization"] <= 100, device
            assert smi(registry=registry).returncode == 0
        finally:
            os.close(fd)
        assert owner.poll() is None, f"the owner died (status {owner.returncode})"
        # The owner rewrites its record from its own state as it works.
        owner.stdin.write("check\n")
        owner.stdin.flush()
        assert owner.stdout.readline().strip() == "alive"
        usage = rt.process_usage()
        _assert_sane(usage)
        assert [(u.pid, u.device, u.bytes_in_use) for u in usage] == [(owner.pid, 0, 4096 + 8192)]
        owner.stdin.write("exit\n")
        owner.stdin.flush()
        assert owner.wait(60) == 0
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(60)


def test_smi_table_prints_no_control_characters_of_a_name(registry, run_python):
    # A process names itself (prctl, /proc/self/comm): the table goes to a terminal.
    result = run_python(
        """
        import openreg_runtime as rt
        from openreg_runtime.smi import main
        with open("/proc/self/comm", "w") as comm:
            comm.write("\\x1b[2Jx\\ty")
        rt.malloc(4096)
        main([])
        """,
        env={"OPENREG_REGISTRY_DIR": str(registry)},
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\t" not in result.stdout
    assert "?[2Jx?y" in result.stdout


# ---- Ended processes -------------------------------------------------------------


def _state(pid: int) -> tuple[str, int]:
    """(state, number of threads) from /proc/<pid>/stat, whatever the name holds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[17])


def test_a_killed_but_unreaped_process_holds_no_memory(children, registry):
    survivor = children("0:8192")
    zombie = children("0:1048576", "1:4096")
    os.kill(zombie.pid, signal.SIGKILL)
    # Waits for the exit without reaping: the process stays a zombie.
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)
    assert _state(zombie.pid)[0] == "Z"
    assert [(u.pid, u.device) for u in rt.process_usage()] == [(survivor.pid, 0)]
    assert [path.name.split("-")[1] for path in registry.iterdir()] == [str(survivor.pid)]
    result = smi("--json", registry=registry)
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    assert [d["memory_used"] for d in devices] == [8192, 0]
    assert _state(zombie.pid)[0] == "Z", "the test itself must not have reaped it"


def test_a_name_with_parentheses_and_spaces_is_not_read_as_a_state(registry, run_python):
    # /proc/<pid>/stat is "pid (name) state ...": a reader that split at the first
    # ')' would read this live process's state as Z (zombie) and drop it.
    result = run_python(
        """
        import json, openreg_runtime as rt
        with open("/proc/self/comm", "w") as comm:
            comm.write("x) Z 1 (y")
        rt.malloc(4096)
        print(json.dumps([u.name for u in rt.process_usage()]))
        """,
        env={"OPENREG_REGISTRY_DIR": str(registry)},
    )
    assert result.json() == ["x) Z 1 (y"]


# A process whose main thread has exited while another thread keeps using the
# device: /proc/<pid>/stat shows the main thread's state, Z, yet the process lives.
LEADER_EXITS = r"""
#include <pthread.h>
#include <stdio.h>

#include "openreg.h"

static void* keep_running(void* unused) {
  (void)unused;
  char line[16];
  while (fgets(line, sizeof line, stdin) != NULL) {}  /* until stdin closes */
  return NULL;
}

int main(void) {
  void* pointer = NULL;
  if (orMalloc(&pointer, 4096) != orSuccess) return 1;
  pthread_t thread;
  if (pthread_create(&thread, NULL, keep_running, NULL) != 0) return 2;
  pthread_exit(NULL);
}
"""


def test_a_process_whose_main_thread_exited_is_still_listed(tmp_path, registry):
    compiler = shutil.which("cc")
    assert compiler is not None, "a C compiler (cc) is required to test the C API"
    source, executable = tmp_path / "leader.c", tmp_path / "leader"
    source.write_text(LEADER_EXITS)
    library_dir = rt.get_library_dir()
    build = subprocess.run(
        [compiler, "-std=c11", "-Wall", "-Werror", f"-I{rt.get_include()}", str(source), "-o",
         str(executable), f"-L{library_dir}", "-lopenreg", f"-Wl,-rpath,{library_dir}", "-pthread"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    process = subprocess.Popen(
        [str(executable)],
        env=clean_environment(OPENREG_REGISTRY_DIR=str(registry)),
        stdin=subprocess.PIPE,
    )
    try:
        # Nothing reports the main thread's exit to another process: poll for it.
        deadline = time.monotonic() + 60
        while _state(process.pid)[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        state, threads = _state(process.pid)
        assert state == "Z" and threads > 1, "the main thread alone should have exited"
        assert [(u.pid, u.bytes_in_use) for u in rt.process_usage()] == [(process.pid, 4096)]
    finally:
        process.stdin.close()  # the remaining thread returns; the process exits
        assert process.wait(60) == 0


# ---- A directory that is not private ---------------------------------------------


@pytest.mark.parametrize("path", ["/tmp", "/dev/shm"])
def test_a_shared_system_directory_is_refused_with_advice_that_fits(monkeypatch, path):
    monkeypatch.setenv("OPENREG_REGISTRY_DIR", path)
    with pytest.raises(rt.NotPermittedError) as refused:
        rt.process_usage()
    message = str(refused.value)
    assert f"the OpenReg registry directory {path} " in message
    assert "remove" not in message and "chmod" not in message, "never advise changing " + path
    assert "point OPENREG_REGISTRY_DIR at a directory of its own" in message
    assert "mode 0700" in message and "or unset it" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
@pytest.mark.parametrize("owner", ["the user", "another user"])
def test_the_default_directory_gets_advice_that_fits(run_python, owner):
    # Run as an unused uid, whose default directory (/dev/shm/openreg-<uid>) the
    # test plants: OpenReg's own directory may be repaired or removed.
    uid = 2_000_000_000 + os.getpid() % 1_000_000
    directory = Path(f"/dev/shm/openreg-{uid}")
    directory.mkdir(mode=0o700)
    try:
        directory.chmod(0o755)
        if owner == "the user":
            os.chown(directory, uid, -1)
        result = run_python(
            f"""
            import json, os, openreg_runtime as rt
            os.setuid({uid})
            try:
                rt.process_usage()
            except rt.NotPermittedError as error:
                print(json.dumps(str(error)))
            """
        )
        message = result.json()
    finally:
        directory.rmdir()
    assert f"the OpenReg registry directory {directory} must belong to this user (uid {uid})" in (
        message
    )
    if owner == "the user":
        assert f"run chmod 700 {directory}" in message
    else:
        assert f"have its owner or an administrator remove {directory}" in message
        assert "chmod" not in message
    assert "set OPENREG_REGISTRY_DIR to a directory of its own" in message
