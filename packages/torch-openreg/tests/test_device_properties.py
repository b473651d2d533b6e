"""torch.openreg.get_device_properties / get_device_capability / can_device_access_peer,
and the dtypes torch.accelerator.get_device_capability reports for openreg.

Checked against torch.cuda's documented shapes (field names and types of
torch._C._CudaDeviceProperties, (major, minor) tuples) and against what the
device really does: its capacity, the cores its kernels may run on, cross-device
copies, and dtype conversions compared with the CPU's.
"""

from __future__ import annotations

import json
import os
import typing

import pytest
import torch

# The fields torch.cuda's properties object has, with their types (from torch's stub).
CUDA_FIELDS = typing.get_type_hints(torch._C._CudaDeviceProperties)


def test_properties_have_every_field_of_cuda_properties():
    properties = torch.openreg.get_device_properties(0)
    for name, annotation in CUDA_FIELDS.items():
        value = getattr(properties, name)
        expected = {"_int": int, "str": str}.get(getattr(annotation, "__name__", ""), annotation)
        assert isinstance(value, expected), (name, value)


def test_properties_describe_the_device(devices: int):
    for index in range(devices):
        properties = torch.openreg.get_device_properties(index)
        assert properties.name == torch.openreg.get_device_name(index)
        assert properties.total_memory == torch.openreg.mem_get_info(index)[1]
        assert properties.multi_processor_count == len(os.sched_getaffinity(0))
        assert properties.max_threads_per_block == properties.multi_processor_count
        assert properties.pci_device_id == index
        assert (properties.major, properties.minor) == torch.openreg.get_device_capability(index)


def test_properties_accept_device_forms():
    reference = torch.openreg.get_device_properties(1)
    for form in (1, "openreg:1", torch.device("openreg", 1)):
        assert torch.openreg.get_device_properties(form) == reference


def test_properties_default_to_the_current_device():
    with torch.openreg.device(1):
        assert torch.openreg.get_device_properties().pci_device_id == 1
        assert torch.openreg.get_device_capability() == torch.openreg.get_device_capability(1)


def test_uuids_differ_between_devices_and_are_stable(devices: int):
    uuids = [torch.openreg.get_device_properties(i).uuid for i in range(devices)]
    assert len(set(uuids)) == devices
    assert uuids == [torch.openreg.get_device_properties(i).uuid for i in range(devices)]


def test_repr_names_the_device():
    text = repr(torch.openreg.get_device_properties(0))
    assert "OpenReg simulated device 0" in text
    assert "total_memory=" in text and "multi_processor_count=" in text


@pytest.mark.parametrize("call", ["get_device_properties", "get_device_capability"])
@pytest.mark.parametrize("device", [5, "openreg:7", "cpu"])
def test_invalid_device_raises(call: str, device: object):
    with pytest.raises((RuntimeError, ValueError)):
        getattr(torch.openreg, call)(device)


@pytest.mark.child_interpreters
def test_capacity_and_cores_follow_the_environment(run_python):
    # A process restricted to one core gets one "multiprocessor"; the capacity
    # is OPENREG_DEVICE_MEMORY.
    result = run_python(
        """
        import json, os
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        import torch, torch_openreg
        p = torch.openreg.get_device_properties(0)
        print(json.dumps([p.total_memory, p.multi_processor_count]))
        """,
        OPENREG_DEVICE_MEMORY="512MiB",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [512 << 20, 1]


def test_capability_is_a_pair_of_ints():
    capability = torch.openreg.get_device_capability(0)
    assert isinstance(capability, tuple) and len(capability) == 2
    assert all(isinstance(part, int) for part in capability)


# ---- peer access ------------------------------------------------------------------


def test_can_device_access_peer(devices: int):
    for device in range(devices):
        for peer in range(devices):
            assert torch.openreg.can_device_access_peer(device, peer) == (device != peer)


def test_peer_access_is_real():
    # What "access" means: work on device 0 reads device 1's memory and back.
    source = torch.randn(64, generator=torch.Generator().manual_seed(0))
    on_one = source.to("openreg:1")
    on_zero = on_one.to("openreg:0")
    assert torch.equal((on_zero + on_one.to("openreg:0")).cpu(), source * 2)


@pytest.mark.parametrize(("device", "peer"), [(0, 9), (9, 0), (0, "cpu")])
def test_can_device_access_peer_rejects_invalid_devices(device: object, peer: object):
    with pytest.raises((RuntimeError, ValueError)):
        torch.openreg.can_device_access_peer(device, peer)


def test_can_device_access_peer_requires_a_peer():
    with pytest.raises(ValueError, match="peer"):
        torch.openreg.can_device_access_peer(0, None)


# ---- dtypes reported through torch.accelerator --------------------------------------

QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


def _all_dtypes() -> list[torch.dtype]:
    return [value for value in vars(torch).values() if isinstance(value, torch.dtype)]


def _supported() -> set[torch.dtype]:
    return set(torch.accelerator.get_device_capability("openreg:0")["supported_dtypes"])


def _cpu_converts(dtype: torch.dtype) -> bool:
    try:
        torch.zeros(4, dtype=dtype).to(torch.float32)
        torch.zeros(4, dtype=torch.float32).to(dtype)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def test_accelerator_capability_excludes_quantized_and_bit_types():
    supported = _supported()
    assert not supported & QUANTIZED
    assert torch.bits8 not in supported
    assert torch.uint4 not in supported
    assert torch.float32 in supported and torch.bfloat16 in supported and torch.bool in supported


def test_accelerator_capability_lists_exactly_what_the_cpu_converts():
    # Kernels are the CPU's: a dtype is usable on openreg exactly when the CPU
    # can convert it, and quantized tensors cannot be made on openreg at all.
    expected = {d for d in _all_dtypes() if d not in QUANTIZED and _cpu_converts(d)}
    assert _supported() == expected


# Bit types, sub-byte integers and packed float4: the CPU cannot convert them.
NOT_CONVERTIBLE = {
    torch.bits1x8, torch.bits2x4, torch.bits4x2, torch.bits8, torch.bits16,
    torch.float4_e2m1fn_x2,
    *(getattr(torch, f"{kind}{bits}") for kind in ("int", "uint") for bits in range(1, 8)),
}  # fmt: skip


def test_accelerator_capability_excludes_what_the_cpu_cannot_convert():
    assert not _supported() & NOT_CONVERTIBLE
    assert all(not _cpu_converts(dtype) for dtype in NOT_CONVERTIBLE)


@pytest.mark.parametrize(
    "dtype", sorted(set(_all_dtypes()) - QUANTIZED - NOT_CONVERTIBLE, key=str), ids=str
)
def test_every_supported_dtype_allocates_and_converts_like_the_cpu(dtype: torch.dtype):
    assert dtype in _supported()
    source = torch.arange(-3, 5, dtype=torch.float64)
    host = source.to(dtype)
    device = source.to("openreg").to(dtype)
    assert device.dtype == dtype and device.device.type == "openreg"
    for other in (torch.float32, torch.int64, torch.bool, torch.complex64):
        assert torch.equal(device.to(other).cpu(), host.to(other)), other
    assert torch.equal(device.cpu().view(torch.uint8), host.view(torch.uint8))
