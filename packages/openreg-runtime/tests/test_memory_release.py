"""Freed device memory goes back to the operating system (RssShmem drops)."""

import pytest

MIB = 1 << 20

SOURCE = """
import json
import openreg_runtime as rt

def rss_shmem_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssShmem:"):
                return int(line.split()[1])
    raise SystemExit("no RssShmem line in /proc/self/status")

size = 64 << 20
measurements = {{"start": rss_shmem_kib()}}
{body}
print(json.dumps(measurements))
"""

BODIES = {
    "DeviceBuffer.free": """
buffer = rt.DeviceBuffer(size, device=DEVICE)
buffer.fill(0x5A)
assert buffer.to_bytes(size - 4) == b"\\x5a" * 4
measurements["before"] = rss_shmem_kib()
buffer.free()
measurements["after"] = rss_shmem_kib()
""",
    "context-manager": """
with rt.DeviceBuffer(size, device=DEVICE) as buffer:
    buffer.copy_from(bytes(range(256)) * (size // 256))
    measurements["before"] = rss_shmem_kib()
measurements["after"] = rss_shmem_kib()
""",
    "raw-free": """
pointer = rt.malloc(size, device=DEVICE)
rt.memset(pointer, 1, size)
measurements["before"] = rss_shmem_kib()
rt.free(pointer)
measurements["after"] = rss_shmem_kib()
""",
}


@pytest.mark.parametrize("device", [0, 1])
@pytest.mark.parametrize("how", list(BODIES))
def test_freed_device_memory_is_returned_to_the_system(run_python, how, device):
    body = BODIES[how].replace("DEVICE", str(device))
    measurements = run_python(SOURCE.format(body=body)).json()
    touched_kib = measurements["before"] - measurements["start"]
    released_kib = measurements["before"] - measurements["after"]
    assert touched_kib >= 48 * 1024, f"filling did not touch the pages: {measurements}"
    assert released_kib >= 48 * 1024, f"free() kept the pages resident: {measurements}"


def test_memory_is_reusable_after_release(run_python):
    source = """
    import json
    import openreg_runtime as rt
    results = []
    for round in range(4):
        with rt.DeviceBuffer(48 << 20) as buffer:
            buffer.fill(round + 1)
            results.append(buffer.to_bytes(0, 2).hex())
    print(json.dumps({"results": results, "info": rt.mem_get_info()}))
    """
    report = run_python(source, env={"OPENREG_DEVICE_MEMORY": "64MiB"}).json()
    assert report["results"] == ["0101", "0202", "0303", "0404"]
    assert report["info"] == [64 * MIB, 64 * MIB]
