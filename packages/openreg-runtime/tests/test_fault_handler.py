"""SIGSEGV diagnostics for host access to device memory (child processes, no faulthandler)."""

import re
import signal

import pytest

PREFIX = "openreg: host code accessed device memory at 0x"


def openreg_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("openreg:")]


@pytest.mark.parametrize("device", [0, 1])
@pytest.mark.parametrize(
    ("size", "reserved", "offset"),
    [(8192, 8192, 16), (100, 4096, 16), (3 * 4096, 3 * 4096, 4096 + 5)],
)
def test_reading_device_memory_from_the_host_is_diagnosed(
    run_python, device, size, reserved, offset
):
    source = f"""
    import ctypes, sys
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer({size}, device={device})
    buffer.fill(1)
    print(hex(buffer.ptr), flush=True)
    ctypes.string_at(buffer.ptr + {offset}, 4)
    print("survived", flush=True)
    """
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV, result.stderr
    assert "survived" not in result.stdout
    base = int(result.stdout.split()[0], 16)
    lines = openreg_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(PREFIX)
    assert line.startswith(f"openreg: host code accessed device memory at {hex(base + offset)} ")
    assert f"(device {device}, inside a {reserved}-byte allocation at {hex(base)} + {offset})" in (
        line
    )
    assert "device memory is not host-accessible" in line


def test_writing_device_memory_from_the_host_is_diagnosed(run_python):
    source = """
    import ctypes
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer(4096, device=1)
    ctypes.memset(buffer.ptr + 8, 0, 1)
    """
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV
    (line,) = openreg_lines(result.stderr)
    assert re.match(r"openreg: host code accessed device memory at 0x[0-9a-f]+ \(device 1, ", line)
    assert "inside a 4096-byte allocation" in line


def test_access_from_stream_work_is_diagnosed(run_python):
    source = """
    import ctypes
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer(4096, device=1)
    stream = rt.Stream(device=1)
    stream.launch(lambda: ctypes.string_at(buffer.ptr + 32, 1))
    stream.synchronize()
    print("survived", flush=True)
    """
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV
    assert "survived" not in result.stdout
    (line,) = openreg_lines(result.stderr)
    assert line.startswith(PREFIX)
    assert "(device 1, inside a 4096-byte allocation at 0x" in line
    assert line.split("):")[0].endswith(" + 32")


def test_access_to_freed_device_memory_is_diagnosed(run_python):
    source = """
    import ctypes
    import openreg_runtime as rt
    pointer = rt.malloc(4096)
    rt.free(pointer)
    ctypes.string_at(pointer, 1)
    """
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV
    (line,) = openreg_lines(result.stderr)
    assert line.startswith(PREFIX)
    assert "(device 0, not inside a live allocation)" in line


def test_unrelated_segfault_falls_through_without_diagnostic(run_python):
    source = """
    import ctypes
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer(4096)  # activates the runtime and its SIGSEGV handler
    buffer.fill(0)
    print("active", flush=True)
    ctypes.string_at(1)
    """
    result = run_python(source)
    assert result.stdout.strip() == "active"
    assert result.returncode == -signal.SIGSEGV, result.stderr
    assert openreg_lines(result.stderr) == []


@pytest.mark.parametrize(
    ("access", "diagnosed"),
    [("ctypes.string_at(1)", False), ("ctypes.string_at(buffer.ptr + 1, 1)", True)],
    ids=["unrelated", "device"],
)
def test_previous_python_handler_still_runs(run_python, access, diagnosed):
    """With faulthandler installed first, the runtime chains to it."""
    source = f"""
    import ctypes, faulthandler, sys
    faulthandler.enable(file=sys.stderr)
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer(4096)
    {access}
    """
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr
    lines = openreg_lines(result.stderr)
    if diagnosed:
        assert len(lines) == 1
        assert lines[0].startswith(PREFIX)
        # The diagnostic comes first, then the previous handler's report.
        assert result.stderr.index(PREFIX) < result.stderr.index("Fatal Python error")
    else:
        assert lines == []


def test_no_handler_noise_without_faults(run_python):
    source = """
    import openreg_runtime as rt
    with rt.DeviceBuffer(4096) as buffer:
        buffer.fill(3)
        assert buffer.to_bytes(0, 1) == b"\\x03"
    print("ok")
    """
    result = run_python(source)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert result.stderr == ""


FAULT_AFTER_FAULTHANDLER = {
    "host thread": "ctypes.string_at(buffer.ptr + 1, 1)",
    "stream work": """
stream = rt.Stream()
stream.launch(lambda: ctypes.string_at(buffer.ptr + 1, 1))
stream.synchronize()
""",
}


@pytest.mark.parametrize("where", list(FAULT_AFTER_FAULTHANDLER))
def test_diagnostic_printed_when_faulthandler_is_enabled_after_first_use(run_python, where):
    """Python's faulthandler installed after the runtime's handler: both still report."""
    source = f"""
import ctypes, faulthandler, sys
import openreg_runtime as rt
buffer = rt.DeviceBuffer(4096)
buffer.fill(0)   # the runtime (and its SIGSEGV handler) is active
faulthandler.enable(file=sys.stderr)
{FAULT_AFTER_FAULTHANDLER[where]}
print("survived", flush=True)
"""
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV, result.stderr
    assert "survived" not in result.stdout
    assert "Fatal Python error: Segmentation fault" in result.stderr
    (line,) = openreg_lines(result.stderr)
    assert line.startswith(PREFIX)
    assert "(device 0, inside a 4096-byte allocation at 0x" in line


def test_unrelated_segfault_after_faulthandler_still_kills_without_diagnostic(run_python):
    source = """
import ctypes, faulthandler, sys
import openreg_runtime as rt
rt.DeviceBuffer(4096).fill(0)
faulthandler.enable(file=sys.stderr)
ctypes.string_at(1)
print("survived", flush=True)
"""
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV, result.stderr
    assert "Fatal Python error: Segmentation fault" in result.stderr
    assert openreg_lines(result.stderr) == []


def test_a_sigsegv_sent_with_kill_still_kills_the_process(run_python):
    """Only faults are diagnosed; a SIGSEGV sent with kill() keeps its default action."""
    source = """
import os, signal, time
import openreg_runtime as rt
rt.DeviceBuffer(4096).fill(0)
os.kill(os.getpid(), signal.SIGSEGV)
time.sleep(1)
print("survived", flush=True)
"""
    result = run_python(source)
    assert result.returncode == -signal.SIGSEGV, (result.stdout, result.stderr)
    assert "survived" not in result.stdout
    assert openreg_lines(result.stderr) == []
