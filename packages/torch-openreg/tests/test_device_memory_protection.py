"""Device memory is not host-accessible, as on a real accelerator.

Raw host access to an openreg tensor's data_ptr() kills the process with
SIGSEGV after the runtime's one-line diagnostic; the supported host bridges
(numpy, DLPack) refuse openreg tensors with a clear error instead of touching
device memory, and the storage/tensor accessors copy through the runtime.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest
import torch

DIAGNOSTIC = "openreg: host code accessed device memory at 0x"


def assert_killed_by_segfault(result) -> str:
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith(DIAGNOSTIC)]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.child_interpreters
def test_host_read_of_device_memory_segfaults_with_diagnostic(run_python):
    result = run_python(
        """
        import ctypes, torch, torch_openreg
        t = torch.arange(1024, dtype=torch.float32, device="openreg:1")
        torch.openreg.synchronize(1)
        print(hex(t.data_ptr() + 16), flush=True)
        ctypes.string_at(t.data_ptr() + 16, 4)
        print("survived", flush=True)
        """
    )
    line = assert_killed_by_segfault(result)
    address = result.stdout.split()[0]
    assert "survived" not in result.stdout
    assert line.startswith(f"{DIAGNOSTIC}{address[2:]}")
    # The runtime reports its allocation: the caching allocator's 2 MiB
    # segment, whose first block is this tensor.
    assert "(device 1, inside a 2097152-byte allocation" in line
    assert "+ 16)" in line
    assert "tensor.cpu()" in line


@pytest.mark.child_interpreters
def test_host_write_of_device_memory_segfaults_with_diagnostic(run_python):
    result = run_python(
        """
        import ctypes, torch, torch_openreg
        t = torch.zeros(4, device="openreg")
        ctypes.memset(t.data_ptr(), 0, 4)
        print("survived", flush=True)
        """
    )
    line = assert_killed_by_segfault(result)
    assert "survived" not in result.stdout
    assert "(device 0," in line


def test_numpy_on_openreg_tensor_raises():
    tensor = torch.ones(4, device="openreg")
    with pytest.raises(TypeError, match=r"openreg:0.*Tensor\.cpu\(\)"):
        tensor.numpy()


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
@pytest.mark.parametrize("convert", [np.asarray, np.array], ids=["asarray", "array"])
def test_numpy_conversion_of_openreg_tensor_raises(convert):
    tensor = torch.ones(4, device="openreg:1")
    with pytest.raises(TypeError, match=r"openreg:1.*Tensor\.cpu\(\)"):
        convert(tensor)


def test_from_numpy_rejects_tensor():
    with pytest.raises(TypeError, match=r"expected np\.ndarray"):
        torch.from_numpy(torch.ones(4, device="openreg"))


def test_numpy_round_trip_through_cpu():
    array = np.arange(6, dtype=np.float64).reshape(2, 3)
    on_device = torch.from_numpy(array).to("openreg")
    assert on_device.device == torch.device("openreg:0")
    np.testing.assert_array_equal(on_device.cpu().numpy(), array)
    assert torch.as_tensor(array, device="openreg:1").device == torch.device("openreg:1")
    np.testing.assert_array_equal(torch.tensor(array, device="openreg").cpu().numpy(), array)


def test_numpy_from_dlpack_of_openreg_tensor_raises():
    tensor = torch.ones(4, device="openreg")
    with pytest.raises((RuntimeError, ValueError, BufferError, TypeError)):
        np.from_dlpack(tensor)


def test_torch_from_dlpack_of_openreg_tensor_raises():
    with pytest.raises((RuntimeError, ValueError, BufferError)):
        torch.from_dlpack(torch.ones(4, device="openreg"))


def test_storage_accessors_copy_through_runtime():
    tensor = torch.tensor([1.0, 2.0], device="openreg")
    storage = tensor.untyped_storage()
    expected = torch.tensor([1.0, 2.0]).untyped_storage()
    assert bytes(storage) == bytes(expected)
    assert storage.tolist() == expected.tolist()
    assert storage[4] == expected[4]
    storage[0] = 7
    cpu = torch.tensor([1.0, 2.0])
    cpu.untyped_storage()[0] = 7
    torch.testing.assert_close(tensor.cpu(), cpu, rtol=0, atol=0)


def test_storage_fill_updates_tensor():
    tensor = torch.ones(3, device="openreg")
    tensor.untyped_storage().fill_(0)
    torch.testing.assert_close(tensor.cpu(), torch.zeros(3), rtol=0, atol=0)


def test_data_ptr_is_device_memory_not_host_memory():
    tensor = torch.ones(4, device="openreg")
    cpu = tensor.cpu()
    assert tensor.data_ptr() != 0
    assert cpu.data_ptr() != tensor.data_ptr()
    assert not tensor.is_pinned()
