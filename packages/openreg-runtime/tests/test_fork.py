"""fork(): a child of a process that used the runtime cannot use it (like CUDA).

Each scenario runs in its own interpreter, which forks; the child reports
through its exit code (0 = as expected) and a line on stdout.
"""

import pytest

FORK_AFTER_USE = """
import os, sys
import openreg_runtime as rt

buffer = rt.DeviceBuffer(4096)
buffer.fill(9)
pid = os.fork()
if pid == 0:
    code = 0
    try:
        if rt.device_count() != 2:
            code = 10
        try:
            {call}
        except rt.InitializationError as error:
            message = str(error)
            if "fork" not in message or not message.endswith("[orErrorInitialization]"):
                print("bad message:", message, flush=True)
                code = 11
        else:
            print("no error raised", flush=True)
            code = 12
    except BaseException as error:
        print("unexpected:", type(error).__name__, error, flush=True)
        code = 13
    os._exit(code)
_, status = os.waitpid(pid, 0)
# The parent is unaffected.
assert buffer.to_bytes(0, 1) == b"\\x09"
print("child exit", os.waitstatus_to_exitcode(status), flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize(
    "call",
    [
        "rt.DeviceBuffer(16)",
        "rt.malloc(16)",
        "rt.DeviceBuffer(16, device=1)",
        "rt.mem_get_info()",
        "rt.Stream()",
        "rt.synchronize()",
        "rt.Stream.default()",
        "rt.Event()",
    ],
)
def test_forked_child_cannot_use_the_runtime(run_python, call):
    result = run_python(FORK_AFTER_USE.format(call=call))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "child exit 0" in result.stdout


def test_forked_child_gets_message_mentioning_fork(run_python):
    source = """
    import json, os
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer(4096)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            rt.DeviceBuffer(16)
            text = "no error"
        except rt.InitializationError as error:
            text = str(error)
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    print(json.dumps(text))
    """
    message = run_python(source).json()
    assert "cannot be used in a forked child" in message
    assert "spawn" in message


def test_fork_before_any_device_use_leaves_the_child_usable(run_python):
    source = """
    import os
    import openreg_runtime as rt
    assert rt.device_count() == 2  # reading the configuration does not activate devices
    pid = os.fork()
    if pid == 0:
        try:
            with rt.DeviceBuffer(64) as buffer:
                buffer.copy_from(b"x" * 64)
                ok = buffer.to_bytes() == b"x" * 64
            os._exit(0 if ok else 1)
        except BaseException as error:
            print(type(error).__name__, error, flush=True)
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    raise SystemExit(os.waitstatus_to_exitcode(status))
    """
    result = run_python(source)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"


def test_forked_child_cannot_free_the_parents_memory(run_python):
    """orFree in the child must be refused: the device memory file is shared."""
    source = """
    import ctypes, json, os
    import openreg_runtime as rt
    pointer = rt.malloc(4096)
    rt.memset(pointer, 9, 4096)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            rt.free(pointer)
            text = "free succeeded"
        except rt.InitializationError as error:
            text = str(error)
        except BaseException as error:
            text = f"{type(error).__name__}: {error}"
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    host = ctypes.create_string_buffer(4)
    rt.memcpy(ctypes.addressof(host), pointer, 4, rt.MemcpyKind.DEVICE_TO_HOST)
    print(json.dumps({"child": child, "parent_data": host.raw.hex()}))
    """
    report = run_python(source).json()
    assert "fork" in report["child"], f"child: {report['child']}"
    assert report["parent_data"] == "09090909", "the child wiped the parent's device memory"


def test_normal_exit_of_forked_child_leaves_parent_memory_intact(run_python):
    """A child that exits normally runs DeviceBuffer destructors (orFree)."""
    source = """
    import json, os, sys
    import openreg_runtime as rt
    buffer = rt.DeviceBuffer(4096)
    buffer.fill(7)
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # interpreter shutdown destroys the inherited DeviceBuffer
    os.waitpid(pid, 0)
    print(json.dumps(buffer.to_bytes(0, 4).hex()))
    """
    assert run_python(source).json() == "07070707", "the child's exit wiped the parent's memory"
