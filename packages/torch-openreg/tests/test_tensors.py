"""Tensors on openreg: factories, copies, views, dtypes, resize_/set_, printing.

Every value check is differential: the same thing done on the CPU is the
reference, compared exactly (all of these operations are exact).
"""

from __future__ import annotations

import pytest
import torch


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Exact comparison of an openreg (or CPU) tensor with a CPU reference."""
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)


ALL_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]


def sample(dtype: torch.dtype, shape: tuple[int, ...] = (4, 5)) -> torch.Tensor:
    """A CPU tensor of ``dtype`` with varied values (extremes included)."""
    generator = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=generator) * 1e3
    if dtype.is_floating_point:
        values = torch.randn(shape, dtype=torch.float64, generator=generator) * 1e3
        values.view(-1)[:3] = torch.tensor([float("inf"), float("-inf"), float("nan")])
        return values.to(dtype)
    info = torch.iinfo(dtype)
    values = torch.randint(info.min, info.max, shape, dtype=torch.int64, generator=generator)
    values.view(-1)[:2] = torch.tensor([info.min, info.max])
    return values.to(dtype)


# --- factories ------------------------------------------------------------------------


DEVICES = ["openreg", "openreg:1"]


@pytest.mark.parametrize("device", DEVICES)
def test_empty_shape_dtype_device(device):
    tensor = torch.empty(2, 3, dtype=torch.float64, device=device)
    assert tensor.shape == (2, 3)
    assert tensor.dtype == torch.float64
    assert tensor.device == torch.device(device if ":" in device else "openreg:0")
    assert tensor.is_contiguous()
    assert tensor.stride() == (3, 1)


def test_empty_uses_current_device():
    with torch.openreg.device(1):
        assert torch.empty(1, device="openreg").device == torch.device("openreg:1")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: torch.zeros(2, 3, **kw),
        lambda **kw: torch.ones(2, 3, dtype=torch.int64, **kw),
        lambda **kw: torch.full((3, 2), 3.5, **kw),
        lambda **kw: torch.full((4,), True, **kw),
        lambda **kw: torch.arange(10, **kw),
        lambda **kw: torch.arange(0.5, 3.0, 0.25, **kw),
        lambda **kw: torch.arange(-3, 10, 3, dtype=torch.int16, **kw),
        lambda **kw: torch.eye(4, **kw),
        lambda **kw: torch.eye(2, 5, dtype=torch.int32, **kw),
        lambda **kw: torch.linspace(-1, 1, 7, **kw),
        lambda **kw: torch.logspace(0, 3, 4, dtype=torch.float64, **kw),
        lambda **kw: torch.zeros(0, 3, **kw),
        lambda **kw: torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8, **kw),
        lambda **kw: torch.tensor(2.5, **kw),
    ],
    ids=[
        "zeros",
        "ones_int64",
        "full",
        "full_bool",
        "arange",
        "arange_float",
        "arange_int16",
        "eye",
        "eye_rect",
        "linspace",
        "logspace",
        "zeros_empty",
        "tensor",
        "tensor_0dim",
    ],
)
def test_deterministic_factories_match_cpu(factory, device):
    actual = factory(device=device)
    assert actual.device == torch.device(device if ":" in device else "openreg:0")
    assert_same(actual, factory(device="cpu"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: torch.rand(5, 4, **kw),
        lambda **kw: torch.randn(5, 4, dtype=torch.float64, **kw),
        lambda **kw: torch.randint(-5, 5, (20,), **kw),
        lambda **kw: torch.randint(3, (4, 4), dtype=torch.int8, **kw),
    ],
    ids=["rand", "randn", "randint", "randint_int8"],
)
def test_random_factories_match_cpu_with_same_seed(factory, device):
    torch.manual_seed(1234)
    expected = factory(device="cpu")
    torch.manual_seed(1234)
    actual = factory(device=device)
    assert actual.device == torch.device(device if ":" in device else "openreg:0")
    assert_same(actual, expected)


def test_like_factories_keep_device():
    base = torch.empty(3, 2, dtype=torch.int32, device="openreg:1")
    for tensor in (
        torch.zeros_like(base),
        torch.ones_like(base),
        torch.full_like(base, 7),
        torch.empty_like(base),
    ):
        assert tensor.device == torch.device("openreg:1")
        assert tensor.dtype == torch.int32
        assert tensor.shape == (3, 2)
    assert_same(torch.full_like(base, 7), torch.full((3, 2), 7, dtype=torch.int32))


def test_empty_strided_and_memory_format():
    strided = torch.empty_strided((2, 3), (1, 2), device="openreg")
    assert strided.stride() == (1, 2)
    channels_last = torch.empty(2, 3, 4, 5, device="openreg", memory_format=torch.channels_last)
    assert (
        channels_last.stride()
        == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    )
    assert channels_last.is_contiguous(memory_format=torch.channels_last)


def test_sparse_layouts_supported_mkldnn_rejected():
    # Sparse layouts: see test_sparse.py. MKLDNN is a CPU-only layout, as on CUDA.
    assert torch.empty(2, 2, layout=torch.sparse_coo, device="openreg").is_sparse
    with pytest.raises(RuntimeError, match="mkldnn"):
        torch.empty(2, 2, layout=torch._mkldnn, device="openreg")


# --- copies ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_dtype_round_trip_is_exact(dtype):
    cpu = sample(dtype)
    on_device = cpu.to("openreg")
    assert on_device.dtype == dtype
    assert on_device.device == torch.device("openreg:0")
    back = on_device.cpu()
    assert back.dtype == dtype
    # Bitwise: NaN payloads and signed zeros must survive too.
    assert torch.equal(back.view(torch.uint8), cpu.view(torch.uint8))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_dtype_round_trip_through_second_device(dtype):
    cpu = sample(dtype)
    moved = cpu.to("openreg:0").to("openreg:1")
    assert moved.device == torch.device("openreg:1")
    assert torch.equal(moved.cpu().view(torch.uint8), cpu.view(torch.uint8))


def test_copy_cpu_to_openreg():
    source = torch.arange(12.0).reshape(3, 4)
    destination = torch.zeros(3, 4, device="openreg")
    returned = destination.copy_(source)
    assert returned is destination
    assert_same(destination, source)


def test_copy_openreg_to_cpu():
    source = torch.arange(12.0).reshape(3, 4).to("openreg")
    destination = torch.zeros(3, 4)
    destination.copy_(source)
    assert_same(destination, torch.arange(12.0).reshape(3, 4))


def test_copy_openreg0_to_openreg1():
    source = torch.arange(12.0, device="openreg:0").reshape(3, 4)
    destination = torch.zeros(3, 4, device="openreg:1")
    destination.copy_(source)
    assert destination.device == torch.device("openreg:1")
    assert_same(destination, torch.arange(12.0).reshape(3, 4))
    # The source is untouched.
    assert_same(source, torch.arange(12.0).reshape(3, 4))


def test_copy_openreg1_to_openreg0_while_current_is_1():
    source = torch.arange(6, device="openreg:1")
    destination = torch.zeros(6, dtype=torch.int64, device="openreg:0")
    with torch.openreg.device(1):
        destination.copy_(source)
    assert_same(destination, torch.arange(6))


def test_copy_same_device():
    source = torch.arange(5.0, device="openreg")
    destination = torch.zeros(5, device="openreg")
    destination.copy_(source)
    source.fill_(-1)
    assert_same(destination, torch.arange(5.0))


def test_copy_between_partially_overlapping_views_is_refused_as_on_the_cpu():
    x = torch.arange(10.0)
    with pytest.raises(RuntimeError, match="single memory location") as on_cpu:
        x[1:].copy_(x[:-1])
    on_device = torch.arange(10.0, device="openreg")
    with pytest.raises(RuntimeError, match="single memory location") as raised:
        on_device[1:].copy_(on_device[:-1])
    assert str(raised.value) == str(on_cpu.value)
    assert_same(on_device, torch.arange(10.0))  # untouched
    on_device.copy_(on_device)  # the same elements exactly: allowed, as on the CPU
    assert_same(on_device, torch.arange(10.0))


def test_copy_broadcasts_source():
    destination = torch.zeros(3, 4, device="openreg")
    destination.copy_(torch.arange(4.0))
    assert_same(destination, torch.arange(4.0).expand(3, 4))


@pytest.mark.parametrize(
    ("source_device", "destination_device"),
    [("cpu", "openreg"), ("openreg", "cpu"), ("openreg", "openreg"), ("openreg", "openreg:1")],
)
@pytest.mark.parametrize(
    ("source_dtype", "destination_dtype"),
    [
        (torch.float64, torch.int32),
        (torch.float32, torch.float16),
        (torch.int64, torch.bfloat16),
        (torch.float32, torch.complex128),
        (torch.int32, torch.bool),
        (torch.uint8, torch.float64),
    ],
    ids=str,
)
def test_copy_with_dtype_conversion(
    source_device, destination_device, source_dtype, destination_dtype
):
    reference_source = (torch.randn(4, 6, generator=torch.Generator().manual_seed(3)) * 50).to(
        source_dtype
    )
    expected = torch.empty(4, 6, dtype=destination_dtype).copy_(reference_source)
    destination = torch.empty(4, 6, dtype=destination_dtype, device=destination_device)
    destination.copy_(reference_source.to(source_device))
    assert_same(destination, expected)


@pytest.mark.parametrize(
    ("source_device", "destination_device"),
    [("cpu", "openreg"), ("openreg", "cpu"), ("openreg", "openreg"), ("openreg", "openreg:1")],
)
def test_copy_non_contiguous_source(source_device, destination_device):
    base = torch.arange(60.0).reshape(3, 4, 5)
    source = base.to(source_device).permute(2, 0, 1)[:, 1:, ::2]
    expected = base.permute(2, 0, 1)[:, 1:, ::2]
    assert not source.is_contiguous()
    destination = torch.empty(expected.shape, device=destination_device)
    destination.copy_(source)
    assert_same(destination, expected)


@pytest.mark.parametrize(
    ("source_device", "destination_device"),
    [("cpu", "openreg"), ("openreg", "cpu"), ("openreg", "openreg"), ("openreg", "openreg:1")],
)
def test_copy_into_non_contiguous_destination(source_device, destination_device):
    expected = torch.zeros(6, 8)
    expected[::2, 1::3] = torch.arange(9.0).reshape(3, 3)
    base = torch.zeros(6, 8, device=destination_device)
    view = base[::2, 1::3]
    assert not view.is_contiguous()
    view.copy_(torch.arange(9.0).reshape(3, 3).to(source_device))
    assert_same(base, expected)


def test_copy_transposed_into_transposed():
    source = torch.arange(12.0).reshape(3, 4).to("openreg").t()
    destination = torch.zeros(3, 4, device="openreg:1").t()
    destination.copy_(source)
    assert_same(destination, torch.arange(12.0).reshape(3, 4).t())
    assert destination.stride() == (1, 4)


def test_copy_from_expanded_source():
    source = torch.tensor([1.0, 2.0], device="openreg").expand(3, 2)
    assert source.stride() == (0, 1)
    assert_same(source.cpu(), torch.tensor([[1.0, 2.0]] * 3))
    assert_same(source.contiguous(), torch.tensor([[1.0, 2.0]] * 3))


@pytest.mark.parametrize(
    ("target", "expected_device"),
    [
        ("openreg", "openreg:0"),
        ("openreg:1", "openreg:1"),
        (torch.device("openreg", 1), "openreg:1"),
        ("cpu", "cpu"),
    ],
)
def test_to_device(target, expected_device):
    source = torch.arange(6).reshape(2, 3).to("openreg")
    moved = source.to(target)
    assert moved.device == torch.device(expected_device)
    assert_same(moved, torch.arange(6).reshape(2, 3))


def test_to_device_and_dtype():
    source = torch.arange(6.0, device="openreg")
    moved = source.to("openreg:1", torch.float16)
    assert moved.device == torch.device("openreg:1")
    assert_same(moved, torch.arange(6.0).half())
    assert_same(source.to(torch.int8), torch.arange(6).to(torch.int8))


def test_to_same_device_returns_self_and_copy_true_does_not():
    source = torch.arange(3.0, device="openreg")
    assert source.to("openreg") is source
    assert source.to("openreg:0") is source
    copied = source.to("openreg", copy=True)
    assert copied is not source
    copied.fill_(0)
    assert_same(source, torch.arange(3.0))


def test_to_non_blocking_then_synchronize():
    pinned = torch.arange(1000.0).pin_memory()
    on_device = pinned.to("openreg", non_blocking=True)
    back = on_device.to("cpu", non_blocking=True)
    torch.openreg.synchronize()
    assert_same(back, torch.arange(1000.0))


def test_clone_is_independent_copy():
    source = torch.arange(4.0, device="openreg")
    clone = source.clone()
    assert clone.device == source.device
    assert clone.untyped_storage().data_ptr() != source.untyped_storage().data_ptr()
    clone.fill_(7)
    assert_same(source, torch.arange(4.0))


# --- views --------------------------------------------------------------------------


def assert_shares_storage(view: torch.Tensor, base: torch.Tensor) -> None:
    assert view.device == base.device
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


VIEWS = {
    "view": lambda t: t.view(4, 6),
    "view_dtype": lambda t: t.view(torch.int32),
    "reshape": lambda t: t.reshape(2, 12),
    "flatten": lambda t: t.flatten(),
    "transpose": lambda t: t.transpose(0, 2),
    "t": lambda t: t[0].t(),
    "permute": lambda t: t.permute(2, 0, 1),
    "narrow": lambda t: t.narrow(1, 1, 2),
    "select": lambda t: t.select(2, 3),
    "slice_step": lambda t: t[:, ::2, 1:],
    "expand": lambda t: t[:, :1, :].expand(2, 5, 4),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:, :1].squeeze(1),
    "unfold": lambda t: t.reshape(24).unfold(0, 5, 3),
    "as_strided": lambda t: t.as_strided((3, 3), (5, 2), 1),
    "diagonal": lambda t: t.diagonal(0, 1, 2),
    "diagonal_offset": lambda t: t[0].diagonal(1),
    "chunk": lambda t: t.chunk(2, dim=2)[1],
    "split": lambda t: t.split([1, 2], dim=1)[1],
    "unbind": lambda t: t.unbind(0)[1],
    "movedim": lambda t: t.movedim(0, 2),
    "real_view": lambda t: torch.view_as_real(t.to(torch.complex64))[..., 0],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_values_match_cpu(name):
    make = VIEWS[name]
    cpu = torch.arange(24.0).reshape(2, 3, 4)
    actual = make(cpu.to("openreg"))
    expected = make(cpu)
    assert actual.shape == expected.shape
    if name != "real_view":
        assert actual.stride() == expected.stride()
        assert actual.storage_offset() == expected.storage_offset()
    assert actual.is_contiguous() == expected.is_contiguous()
    assert_same(actual, expected)


@pytest.mark.parametrize("name", [n for n in VIEWS if n not in ("real_view", "expand")])
def test_mutating_view_changes_base(name):
    make = VIEWS[name]
    cpu = torch.arange(24.0).reshape(2, 3, 4).clone()  # not itself a view
    base = cpu.to("openreg")
    view = make(base)
    cpu_view = make(cpu)
    # Autograd's view tracking agrees with the CPU (view(dtype) is not tracked there either).
    assert (view._base is base) == (cpu_view._base is cpu)
    assert_shares_storage(view, base)
    view.fill_(-1)
    cpu_view.fill_(-1)
    assert_same(base, cpu)


def test_setitem_on_view_writes_base():
    base = torch.zeros(3, 4, device="openreg")
    base[1][2] = 5.0
    base[:, 0] = torch.tensor([1.0, 2.0, 3.0], device="openreg")
    expected = torch.zeros(3, 4)
    expected[1][2] = 5.0
    expected[:, 0] = torch.tensor([1.0, 2.0, 3.0])
    assert_same(base, expected)


def test_mutating_base_is_seen_by_view():
    base = torch.zeros(4, 4, device="openreg")
    view = base.t()[1:3]
    base.add_(torch.arange(16.0, device="openreg").reshape(4, 4))
    assert_same(view, torch.arange(16.0).reshape(4, 4).t()[1:3])


def test_view_as_complex_and_real_share_storage():
    cpu = torch.randn(3, 2, generator=torch.Generator().manual_seed(1))
    base = cpu.to("openreg")
    complex_view = torch.view_as_complex(base)
    assert complex_view.dtype == torch.complex64
    assert_shares_storage(complex_view, base)
    assert_same(complex_view, torch.view_as_complex(cpu))
    real_view = torch.view_as_real(complex_view)
    assert_shares_storage(real_view, base)
    assert_same(real_view, cpu)
    complex_view.mul_(2j)
    torch.view_as_complex(cpu).mul_(2j)
    assert_same(base, cpu)


def test_reshape_of_non_contiguous_copies():
    cpu = torch.arange(12.0).reshape(3, 4)
    base = cpu.to("openreg")
    reshaped = base.t().reshape(12)
    assert reshaped.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert_same(reshaped, cpu.t().reshape(12))


def test_view_on_incompatible_strides_raises():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.arange(12.0, device="openreg").reshape(3, 4).t().view(12)


def test_contiguous():
    cpu = torch.arange(24.0).reshape(2, 3, 4)
    permuted = cpu.to("openreg").permute(2, 0, 1)
    assert not permuted.is_contiguous()
    contiguous = permuted.contiguous()
    assert contiguous.is_contiguous()
    assert contiguous.stride() == (6, 3, 1)
    assert_same(contiguous, cpu.permute(2, 0, 1).contiguous())
    already = contiguous.contiguous()
    assert already is contiguous


def test_channels_last_conversion_matches_cpu():
    cpu = torch.arange(120.0).reshape(2, 3, 4, 5)
    converted = cpu.to("openreg").contiguous(memory_format=torch.channels_last)
    expected = cpu.contiguous(memory_format=torch.channels_last)
    assert converted.stride() == expected.stride()
    assert_same(converted, expected)


# --- resize_ and set_ ---------------------------------------------------------------


def test_resize_grow_keeps_prefix():
    tensor = torch.arange(6.0, device="openreg")
    tensor.resize_(10)
    assert tensor.shape == (10,)
    assert tensor.untyped_storage().nbytes() >= 40
    assert_same(tensor[:6], torch.arange(6.0))


def test_resize_grow_multidim_keeps_prefix():
    tensor = torch.arange(6, device="openreg:1")
    tensor.resize_(3, 4)
    assert tensor.device == torch.device("openreg:1")
    assert tensor.stride() == (4, 1)
    assert_same(tensor.view(-1)[:6], torch.arange(6))


def test_resize_shrink_keeps_prefix_and_storage():
    tensor = torch.arange(10.0, device="openreg")
    nbytes = tensor.untyped_storage().nbytes()
    tensor.resize_(2, 2)
    assert tensor.shape == (2, 2)
    assert tensor.untyped_storage().nbytes() == nbytes
    assert_same(tensor, torch.arange(4.0).reshape(2, 2))


def test_resize_to_empty_and_back():
    tensor = torch.arange(4.0, device="openreg")
    tensor.resize_(0)
    assert tensor.numel() == 0
    tensor.resize_(4)
    assert_same(tensor, torch.arange(4.0))


def test_resize_negative_raises():
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(2, device="openreg").resize_(-1)


def test_resize_with_memory_format():
    tensor = torch.empty(0, device="openreg")
    tensor.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert (
        tensor.stride()
        == torch.empty(0).resize_(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    )


def test_resize_as():
    tensor = torch.arange(3.0, device="openreg")
    tensor.resize_as_(torch.empty(2, 4))
    assert tensor.shape == (2, 4)
    assert_same(tensor.view(-1)[:3], torch.arange(3.0))


def test_out_argument_is_resized():
    out = torch.empty(0, device="openreg")
    torch.add(torch.ones(2, 3, device="openreg"), 1, out=out)
    assert out.shape == (2, 3)
    assert_same(out, torch.full((2, 3), 2.0))


def test_set_tensor_shares_storage():
    source = torch.arange(10.0, device="openreg")
    tensor = torch.empty(0, device="openreg")
    tensor.set_(source)
    assert tensor.shape == source.shape
    assert_shares_storage(tensor, source)
    tensor[0] = 42.0
    assert source[0].item() == 42.0


def test_set_tensor_view_keeps_layout():
    source = torch.arange(12.0, device="openreg").reshape(3, 4).t()[1:]
    tensor = torch.empty(0, device="openreg")
    tensor.set_(source)
    assert tensor.shape == source.shape
    assert tensor.stride() == source.stride()
    assert tensor.storage_offset() == source.storage_offset()
    assert_same(tensor, torch.arange(12.0).reshape(3, 4).t()[1:])


def test_set_storage():
    source = torch.arange(10.0, device="openreg")
    tensor = torch.empty(0, device="openreg")
    tensor.set_(source.untyped_storage())
    assert tensor.shape == (10,)
    assert_same(tensor, torch.arange(10.0))


def test_set_storage_offset_size_stride():
    source = torch.arange(10.0, device="openreg")
    tensor = torch.empty(0, device="openreg")
    tensor.set_(source.untyped_storage(), 2, (2, 3), (3, 1))
    assert tensor.storage_offset() == 2
    assert_same(tensor, torch.arange(10.0).as_strided((2, 3), (3, 1), 2))
    tensor.fill_(0)
    assert_same(source[2:8], torch.zeros(6))


def test_set_storage_grows_storage_when_needed():
    source = torch.arange(4.0, device="openreg")
    tensor = torch.empty(0, device="openreg")
    tensor.set_(source.untyped_storage(), 0, (8,), (1,))
    assert source.untyped_storage().nbytes() >= 32
    assert_same(tensor[:4], torch.arange(4.0))


def test_set_no_argument_empties():
    tensor = torch.arange(3.0, device="openreg")
    tensor.set_()
    assert tensor.shape == (0,)
    assert tensor.device == torch.device("openreg:0")
    tensor.resize_(2).fill_(1)
    assert_same(tensor, torch.ones(2))


def test_set_cpu_storage_rejected():
    with pytest.raises(RuntimeError, match="Expected an openreg storage"):
        torch.empty(0, device="openreg").set_(torch.arange(3.0).untyped_storage())


def test_set_storage_of_other_device_rejected():
    other = torch.arange(3.0, device="openreg:1").untyped_storage()
    with pytest.raises(RuntimeError, match="openreg:1"):
        torch.empty(0, device="openreg:0").set_(other)


def test_untyped_storage_resize_keeps_prefix():
    tensor = torch.arange(4, dtype=torch.uint8, device="openreg")
    storage = tensor.untyped_storage()
    storage.resize_(8)
    assert storage.nbytes() == 8
    assert storage.cpu().tolist()[:4] == [0, 1, 2, 3]


# --- scalars, empty tensors, printing ------------------------------------------------


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(3.5, torch.float32), (-7, torch.int64), (True, torch.bool), (1 + 2j, torch.complex64)],
)
def test_item(value, dtype):
    tensor = torch.tensor(value, dtype=dtype, device="openreg:1")
    assert tensor.dim() == 0
    assert tensor.item() == value
    assert type(tensor.item()) is type(value)


def test_item_from_view_element():
    tensor = torch.arange(12, device="openreg").reshape(3, 4)
    assert tensor[2, 1].item() == 9
    assert tensor.t()[1, 2].item() == 9


def test_item_on_multi_element_raises():
    with pytest.raises(
        RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"
    ):
        torch.ones(2, device="openreg").item()


def test_python_scalar_conversions():
    tensor = torch.tensor([2.75], device="openreg")
    assert float(tensor) == 2.75
    assert int(tensor) == 2
    assert bool(tensor) is True
    assert bool(torch.tensor(0, device="openreg")) is False


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.float64, torch.bool, torch.complex128], ids=str
)
def test_tolist(dtype):
    cpu = sample(dtype, (3, 2))
    # repr: exact, and NaN compares equal to NaN.
    assert repr(cpu.to("openreg").tolist()) == repr(cpu.tolist())
    assert repr(cpu.to("openreg").t().tolist()) == repr(cpu.t().tolist())


def test_zero_dim_tensor():
    tensor = torch.tensor(5, device="openreg")
    assert tensor.shape == ()
    assert tensor.numel() == 1
    assert tensor.stride() == ()
    assert_same(tensor, torch.tensor(5))
    assert_same(tensor + 1, torch.tensor(6))


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)])
def test_empty_tensors(shape):
    tensor = torch.empty(shape, device="openreg")
    assert tensor.shape == shape
    assert tensor.numel() == 0
    assert tensor.cpu().shape == shape
    assert tensor.tolist() == torch.empty(shape).tolist()
    assert torch.zeros(shape).to("openreg").shape == shape
    assert tensor.clone().shape == shape
    assert tensor.to("openreg:1").device == torch.device("openreg:1")


def test_repr_names_device():
    assert repr(torch.ones(2, device="openreg")) == "tensor([1., 1.], device='openreg:0')"
    assert repr(torch.arange(2, device="openreg:1")) == "tensor([0, 1], device='openreg:1')"
    assert "device='openreg:0'" in repr(torch.empty(0, device="openreg"))
    assert repr(torch.tensor([True], device="openreg")) == "tensor([True], device='openreg:0')"


def test_repr_shows_dtype_and_values_like_cpu():
    cpu = torch.tensor([[1.5, -2.25], [3.0, 4.125]], dtype=torch.float64)
    text = repr(cpu.to("openreg"))
    values = repr(cpu).split(", dtype")[0]
    assert text.startswith(values + ", device='openreg:0'")
    assert text.endswith("dtype=torch.float64)")


def test_str_of_large_tensor_summarises():
    text = str(torch.arange(5000, device="openreg"))
    assert "..." in text
    assert "device='openreg:0'" in text
    assert text == str(torch.arange(5000)).replace(")", ", device='openreg:0')")
