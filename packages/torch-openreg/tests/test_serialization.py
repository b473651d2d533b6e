"""torch.save / torch.load of openreg tensors, modules and state dicts.

Storages are saved with their location ("openreg:N") and restored there, or
wherever map_location says; CPU checkpoints can be loaded onto openreg.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch


def round_trip(obj: object, **load_kwargs: object) -> object:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def reference(shape: tuple[int, ...] = (3, 4), dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 10).to(dtype)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("source", "map_location", "expected"),
    [
        ("openreg:0", None, "openreg:0"),
        ("openreg:1", None, "openreg:1"),
        ("openreg:0", "cpu", "cpu"),
        ("openreg:1", "cpu", "cpu"),
        ("openreg:0", "openreg:1", "openreg:1"),
        ("openreg:1", "openreg:0", "openreg:0"),
        ("openreg:0", torch.device("openreg:1"), "openreg:1"),
        ("openreg:0", {"openreg:0": "openreg:1"}, "openreg:1"),
        ("openreg:1", lambda storage, location: storage, "cpu"),
        ("cpu", "openreg", "openreg:0"),
        ("cpu", "openreg:1", "openreg:1"),
        ("cpu", torch.device("openreg:1"), "openreg:1"),
        ("cpu", {"cpu": "openreg:1"}, "openreg:1"),
    ],
)
def test_tensor_round_trip(source, map_location, expected):
    cpu = reference()
    loaded = round_trip(cpu.to(source), map_location=map_location)
    assert loaded.device == torch.device(expected)
    assert_same(loaded, cpu)


def test_map_location_without_index_uses_current_device():
    cpu = reference()
    with torch.openreg.device(1):
        loaded = round_trip(cpu.to("openreg:0"), map_location="openreg")
    assert loaded.device == torch.device("openreg:1")
    assert_same(loaded, cpu)


@pytest.mark.parametrize(
    "dtype",
    [torch.bool, torch.uint8, torch.int64, torch.float16, torch.bfloat16, torch.complex64],
    ids=str,
)
def test_dtypes_round_trip(dtype):
    cpu = reference((5,), dtype)
    loaded = round_trip(cpu.to("openreg:1"))
    assert loaded.device == torch.device("openreg:1")
    assert_same(loaded, cpu)


def test_save_to_file(tmp_path: Path):
    cpu = reference()
    path = tmp_path / "tensor.pt"
    torch.save(cpu.to("openreg:1"), path)
    loaded = torch.load(path)
    assert loaded.device == torch.device("openreg:1")
    assert_same(loaded, cpu)
    assert_same(torch.load(path, map_location="cpu"), cpu)


def test_non_contiguous_tensor_round_trip():
    cpu = reference((4, 6))
    view = cpu.to("openreg").t()[1:, ::2]
    loaded = round_trip(view)
    assert loaded.shape == view.shape
    assert loaded.stride() == view.stride()
    assert_same(loaded, cpu.t()[1:, ::2])


def test_views_share_storage_after_load():
    base = torch.arange(12.0, device="openreg").reshape(3, 4)
    row = base[1]
    column = base[:, 2]
    loaded_base, loaded_row, loaded_column = round_trip([base, row, column])
    pointer = loaded_base.untyped_storage().data_ptr()
    assert loaded_row.untyped_storage().data_ptr() == pointer
    assert loaded_column.untyped_storage().data_ptr() == pointer
    assert loaded_row.storage_offset() == 4
    assert loaded_column.stride() == (4,)
    loaded_row.fill_(-1)
    loaded_column.fill_(7)
    expected = torch.arange(12.0).reshape(3, 4)
    expected[1] = -1
    expected[:, 2] = 7
    assert_same(loaded_base, expected)
    # The original is untouched.
    assert_same(base, torch.arange(12.0).reshape(3, 4))


def test_views_share_storage_after_load_with_map_location():
    base = torch.arange(6.0, device="openreg:0")
    loaded_base, loaded_view = round_trip([base, base[2:]], map_location="openreg:1")
    assert loaded_base.device == loaded_view.device == torch.device("openreg:1")
    assert loaded_view.untyped_storage().data_ptr() == loaded_base.untyped_storage().data_ptr()
    loaded_view.zero_()
    assert_same(loaded_base, torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0]))


def test_tensors_on_two_devices_in_one_checkpoint():
    first, second = reference((3,)), reference((4,)) + 1
    loaded = round_trip({"a": first.to("openreg:0"), "b": second.to("openreg:1")})
    assert loaded["a"].device == torch.device("openreg:0")
    assert loaded["b"].device == torch.device("openreg:1")
    assert_same(loaded["a"], first)
    assert_same(loaded["b"], second)


def make_module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU())


@pytest.mark.parametrize(
    ("map_location", "expected"),
    [(None, "openreg:0"), ("cpu", "cpu"), ("openreg:1", "openreg:1")],
)
def test_state_dict_round_trip(map_location, expected):
    cpu_module = make_module()
    module = make_module().openreg()
    state = round_trip(module.state_dict(), map_location=map_location)
    assert set(state) == set(cpu_module.state_dict())
    for key, value in cpu_module.state_dict().items():
        assert state[key].device == torch.device(expected), key
        assert_same(state[key], value)


def test_load_state_dict_from_openreg_checkpoint_into_cpu_module():
    source = make_module().openreg()
    with torch.no_grad():
        source[0].weight.mul_(2)
    state = round_trip(source.state_dict(), map_location="cpu")
    target = make_module()
    target.load_state_dict(state)
    assert_same(target[0].weight.detach(), source[0].weight.detach())


def test_cpu_checkpoint_loaded_onto_openreg_module():
    cpu_module = make_module()
    state = round_trip(cpu_module.state_dict(), map_location="openreg:1")
    target = make_module().openreg(1)
    target.load_state_dict(state)
    assert target[0].weight.device == torch.device("openreg:1")
    cpu_module.eval()
    target.eval()
    data = reference((5, 4))
    torch.testing.assert_close(target(data.to("openreg:1")).cpu(), cpu_module(data))


def test_whole_module_round_trip():
    module = make_module().openreg(1)
    loaded = round_trip(module, weights_only=False)
    assert loaded[0].weight.device == torch.device("openreg:1")
    assert isinstance(loaded[0].weight, torch.nn.Parameter)
    assert loaded[0].weight.requires_grad
    for value, original in zip(
        loaded.state_dict().values(), module.state_dict().values(), strict=True
    ):
        assert_same(value, original)


def test_parameter_round_trip_keeps_requires_grad():
    parameter = torch.nn.Parameter(reference((3,)).to("openreg"))
    loaded = round_trip(parameter)
    assert isinstance(loaded, torch.nn.Parameter)
    assert loaded.requires_grad
    assert loaded.device == torch.device("openreg:0")
    assert_same(loaded.detach(), parameter.detach())


def test_optimizer_state_round_trip():
    module = torch.nn.Linear(3, 2).openreg()
    optimizer = torch.optim.Adam(module.parameters())
    module(torch.randn(4, 3, device="openreg")).sum().backward()
    optimizer.step()
    state = round_trip(optimizer.state_dict())
    for key, value in optimizer.state_dict()["state"][0].items():
        if torch.is_tensor(value) and value.dim() > 0:
            assert state["state"][0][key].device == value.device, key
            assert_same(state["state"][0][key], value)


def test_load_onto_missing_device_raises():
    buffer = io.BytesIO()
    torch.save(torch.ones(2), buffer)
    buffer.seek(0)
    with pytest.raises(RuntimeError, match="openreg"):
        torch.load(buffer, map_location="openreg:5")
