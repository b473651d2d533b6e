"""Memory formats: every openreg kernel lays out its results as the CPU kernel does.

For channels_last (4-d) and channels_last_3d (5-d) inputs, and for permuted and
transposed ones, each case runs on the CPU and on openreg and compares sizes,
strides and values (bit for bit; only layouts for uninitialised or random
results). Native kernels (``csrc/kernels/``: factories, views, resize_,
copies, convolutions, RNN cells) and the fallback's planned outputs (which take
the CPU kernel's strides from the first call of each signature) are covered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _differential import to_device

CL, CL3 = torch.channels_last, torch.channels_last_3d


def x4() -> torch.Tensor:
    return torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(0)).to(memory_format=CL)


def x5() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(2, 3, 4, 5, 6, generator=generator).to(memory_format=CL3)


def permuted() -> torch.Tensor:
    return torch.randn(2, 5, 6, 3, generator=torch.Generator().manual_seed(2)).permute(0, 3, 1, 2)


INPUTS = {"channels_last": x4, "channels_last_3d": x5, "permuted": permuted}


def compare(actual: Any, expected: Any, values: bool = True, path: str = "result") -> None:
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), path
        for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
            compare(got, want, values, f"{path}[{index}]")
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, path
        return
    assert actual.device.type == "openreg", path
    assert (actual.shape, actual.stride(), actual.storage_offset()) == (
        expected.shape,
        expected.stride(),
        expected.storage_offset(),
    ), f"{path}: layout differs from the CPU's"
    if values:
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, msg=path)


def check(fn: Callable[..., Any], *args: Any, values: bool = True) -> None:
    expected = fn(*args)
    actual = fn(*to_device(args))
    compare(actual, expected, values)


def test_moving_to_and_from_the_device_keeps_the_format() -> None:
    for make in INPUTS.values():
        x = make()
        moved = x.to("openreg")
        assert moved.stride() == x.stride()
        assert moved.cpu().stride() == x.stride()
        torch.testing.assert_close(moved.cpu(), x, rtol=0, atol=0)
    plain = torch.randn(2, 3, 5, 6)
    expected = plain.to(memory_format=CL)
    compare(plain.to("openreg", memory_format=CL), expected)
    compare(plain.to("openreg").to(memory_format=CL), expected)


@pytest.mark.parametrize(
    "shape, memory_format",
    [((2, 3, 5, 6), CL), ((2, 3, 4, 5, 6), CL3), ((2, 3, 5, 6), torch.contiguous_format)],
    ids=["channels_last", "channels_last_3d", "contiguous"],
)
def test_empty_with_memory_format(
    shape: tuple[int, ...], memory_format: torch.memory_format
) -> None:
    expected = torch.empty(shape, memory_format=memory_format)
    compare(torch.empty(shape, memory_format=memory_format, device="openreg"), expected, False)
    compare(torch.empty_strided(shape, expected.stride(), device="openreg"), expected, False)


LIKE: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "empty_like": (torch.empty_like, False),
    "zeros_like": (torch.zeros_like, True),
    "ones_like": (torch.ones_like, True),
    "full_like": (lambda t: torch.full_like(t, 2.5), True),
    "rand_like": (torch.rand_like, False),
    "randn_like": (torch.randn_like, False),
    "clone": (torch.clone, True),
    "clone-contiguous": (lambda t: t.clone(memory_format=torch.contiguous_format), True),
    "empty_like-channels_last": (
        lambda t: torch.empty_like(t, memory_format=CL if t.dim() == 4 else CL3),
        False,
    ),
    "contiguous-channels_last": (
        lambda t: t.contiguous(memory_format=CL if t.dim() == 4 else CL3),
        True,
    ),
    "to-contiguous": (lambda t: t.to(memory_format=torch.contiguous_format), True),
    "to-dtype": (lambda t: t.to(torch.float64), True),
}


@pytest.mark.parametrize("make", INPUTS)
@pytest.mark.parametrize("name", LIKE)
def test_like_factories_clone_and_conversions(name: str, make: str) -> None:
    fn, values = LIKE[name]
    check(fn, INPUTS[make](), values=values)


@pytest.mark.parametrize("direction", ["host-to-device", "device-to-device", "device-to-host"])
def test_copy_keeps_the_destination_format(direction: str) -> None:
    source = torch.randn(2, 3, 5, 6)
    expected = torch.empty(2, 3, 5, 6, memory_format=CL).copy_(source)
    source_device = "cpu" if direction == "host-to-device" else "openreg"
    target_device = "cpu" if direction == "device-to-host" else "openreg"
    target = torch.empty(2, 3, 5, 6, memory_format=CL, device=target_device)
    target.copy_(source.to(source_device))
    assert target.stride() == expected.stride()
    torch.testing.assert_close(target.cpu(), expected, rtol=0, atol=0)


RESIZES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "channels_last": lambda t: t.resize_(2, 3, 5, 6, memory_format=CL),
    "channels_last_3d": lambda t: t.resize_(2, 3, 4, 5, 6, memory_format=CL3),
    "contiguous": lambda t: t.resize_(2, 3, 5, 6, memory_format=torch.contiguous_format),
    "same-sizes-keep-strides": lambda t: t.resize_(t.shape),
    "new-sizes-are-contiguous": lambda t: t.resize_(2, 3, 5, 7),
    "resize_as_": lambda t: t.resize_as_(x4()),
}


@pytest.mark.parametrize("name", RESIZES)
@pytest.mark.parametrize("start", ["small", "channels_last"])
def test_resize_with_memory_format(name: str, start: str) -> None:
    initial = torch.randn(3) if start == "small" else x4()
    check(RESIZES[name], initial, values=False)


def test_resize_refuses_preserve_format_like_the_cpu() -> None:
    with pytest.raises(RuntimeError) as cpu_error:
        torch.empty(4).resize_(2, 2, memory_format=torch.preserve_format)
    with pytest.raises(RuntimeError) as device_error:
        torch.empty(4, device="openreg").resize_(2, 2, memory_format=torch.preserve_format)
    assert str(device_error.value) == str(cpu_error.value)


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "permute": lambda t: t.permute(0, 2, 3, 1),
    "transpose": lambda t: t.transpose(1, 2),
    "narrow": lambda t: t.narrow(2, 1, 3),
    "select": lambda t: t[1],
    "slice-channels": lambda t: t[:, 1:],
    "unfold": lambda t: t.unfold(2, 2, 1),
    "as_strided": lambda t: t.as_strided((2, 3), (1, 2), 1),
    "flatten-last": lambda t: t.flatten(2),
    "reshape": lambda t: t.reshape(2, -1),
    "squeeze": lambda t: t[:, :1].squeeze(1),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "expand": lambda t: t[:, :, :1].expand(2, 3, 4, 6),
}


@pytest.mark.parametrize("make", ["channels_last", "permuted"])
@pytest.mark.parametrize("name", VIEWS)
def test_views_of_channels_last_tensors(name: str, make: str) -> None:
    check(VIEWS[name], INPUTS[make]())


def test_invalid_view_raises_like_the_cpu() -> None:
    with pytest.raises(RuntimeError) as cpu_error:
        x4().view(2, -1)
    with pytest.raises(RuntimeError) as device_error:
        x4().to("openreg").view(2, -1)
    assert str(device_error.value) == str(cpu_error.value)


def weights(*shape: int, channels_last: bool = False) -> torch.Tensor:
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    if channels_last:
        w = w.to(memory_format=CL if w.dim() == 4 else CL3)
    return w


def convolution_with_gradients(
    conv: Callable[..., torch.Tensor], x: torch.Tensor, w: torch.Tensor, **options: Any
) -> list[torch.Tensor]:
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    bias = torch.zeros(w.shape[1] if conv is F.conv_transpose2d else w.shape[0], device=x.device)
    bias.requires_grad_()
    y = conv(x, w, bias, **options)
    # The incoming gradient in the output's own format, as autograd passes it.
    grad = torch.ones_like(y).mul_(0.5)
    y.backward(grad)
    return [y, x.grad, w.grad, bias.grad]


CONVOLUTIONS = {
    "conv2d-channels_last-input": (F.conv2d, x4, lambda: weights(4, 3, 3, 3), {}),
    "conv2d-channels_last-weight": (
        F.conv2d,
        lambda: torch.randn(2, 3, 5, 6),
        lambda: weights(4, 3, 3, 3, channels_last=True),
        {},
    ),
    "conv2d-both-strided-padded": (
        F.conv2d,
        x4,
        lambda: weights(4, 3, 3, 3, channels_last=True),
        {"stride": 2, "padding": 1},
    ),
    "conv2d-grouped": (F.conv2d, x4, lambda: weights(6, 1, 3, 3), {"groups": 3}),
    "conv2d-dilated": (F.conv2d, x4, lambda: weights(4, 3, 2, 2), {"dilation": 2}),
    "conv_transpose2d": (F.conv_transpose2d, x4, lambda: weights(3, 4, 3, 3), {}),
    "conv3d-channels_last_3d-input": (F.conv3d, x5, lambda: weights(4, 3, 2, 2, 2), {}),
    "conv3d-channels_last_3d-weight": (
        F.conv3d,
        lambda: torch.randn(2, 3, 4, 5, 6),
        lambda: weights(4, 3, 2, 2, 2, channels_last=True),
        {},
    ),
}


@pytest.mark.parametrize("name", CONVOLUTIONS)
def test_convolution_forward_and_backward(name: str) -> None:
    conv, make_input, make_weight, options = CONVOLUTIONS[name]
    x, w = make_input(), make_weight()
    expected = convolution_with_gradients(conv, x, w, **options)
    actual = convolution_with_gradients(conv, *to_device((x, w)), **options)
    compare(actual, expected)


def transposed(*shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*reversed(shape), generator=generator).t()


def cell_with_gradients(name: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    leaves = [t.detach().requires_grad_() for t in inputs]
    if name == "lstm":
        x, h, c, w_ih, w_hh, b_ih, b_hh = leaves
        outputs = list(torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh))
    else:
        x, h, w_ih, w_hh, b_ih, b_hh = leaves
        outputs = [torch.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)]
    sum(o.sum() for o in outputs).backward()
    return [o.detach() for o in outputs] + [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rnn_cells_follow_the_layout_of_their_inputs(name: str) -> None:
    # Transposed (column-major) input and state: the CPU's cells give results
    # in the state's layout; openreg's fused cells must too.
    gates = 4 if name == "lstm" else 3
    state = [transposed(3, 5)] * (2 if name == "lstm" else 1)
    parameters = [torch.randn(gates * 5, 4), torch.randn(gates * 5, 5)]
    parameters += [torch.randn(gates * 5), torch.randn(gates * 5)]
    inputs = [transposed(3, 4), *[s.clone() for s in state], *parameters]
    expected = cell_with_gradients(name, inputs)
    actual = cell_with_gradients(name, to_device(inputs))
    # Layouts exactly; values within rounding (the fused cell adds the biases
    # separately, the CPU's cell inside its matrix products).
    compare(actual, expected, values=False)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


FALLBACK_OPERATORS: dict[str, Callable[[torch.Tensor], Any]] = {
    "add-scalar": lambda t: t + 1,
    "mul": lambda t: t * t,
    "add-contiguous-other": lambda t: t + t.contiguous(),
    "relu": F.relu,
    "sum-keepdim": lambda t: t.sum(1, keepdim=True),
    "softmax-channels": lambda t: t.softmax(1),
    "batch_norm": lambda t: F.batch_norm(t, None, None, training=True),
    "group_norm": lambda t: F.group_norm(t, 3),
    "max_pool": lambda t: (F.max_pool2d if t.dim() == 4 else F.max_pool3d)(t, 2),
    "avg_pool": lambda t: (F.avg_pool2d if t.dim() == 4 else F.avg_pool3d)(t, 2),
    "adaptive_avg_pool": lambda t: (
        F.adaptive_avg_pool2d if t.dim() == 4 else F.adaptive_avg_pool3d
    )(t, 2),
    "interpolate-nearest": lambda t: F.interpolate(t, scale_factor=2),
    "interpolate-linear": lambda t: F.interpolate(
        t, scale_factor=2, mode="bilinear" if t.dim() == 4 else "trilinear"
    ),
}


@pytest.mark.parametrize("make", INPUTS)
@pytest.mark.parametrize("name", FALLBACK_OPERATORS)
def test_operators_through_the_fallback(name: str, make: str) -> None:
    x = INPUTS[make]()
    # Twice: the first call of a signature runs synchronously, later calls are
    # planned (asynchronous) from what the first produced.
    for _ in range(2):
        check(FALLBACK_OPERATORS[name], x)
