"""torch.autocast("openreg"): CUDA's policy, the autocast state API, the weight-cast cache.

Per policy category, representative operators run under openreg autocast; their
output dtype must be what CUDA documents for the category, and their values
must equal the same operator computed on the CPU with the casts written out
explicitly (no autocast involved). openreg runs the CPU's kernels on the same
dtypes, so the values are expected to be bit-identical; the comparisons are
exact unless a comment says otherwise.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

LOWER = [torch.float16, torch.bfloat16]
EXACT = {"rtol": 0.0, "atol": 0.0}
BCE_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast."
)


def inputs(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=generator) for shape in shapes]


def on_openreg(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to("openreg") for t in tensors]


def run_autocast(
    function: Callable[..., torch.Tensor], cpu_args: list[torch.Tensor], dtype: torch.dtype
) -> torch.Tensor:
    with torch.autocast("openreg", dtype=dtype):
        return function(*on_openreg(*cpu_args))


# ---- the autocast state API ----------------------------------------------------------


def test_default_dtype_is_float16_like_cuda() -> None:
    assert torch.get_autocast_dtype("openreg") == torch.float16
    assert torch.get_autocast_dtype("openreg") == torch.get_autocast_dtype("cuda")
    with torch.autocast("openreg"):
        assert torch.get_autocast_dtype("openreg") == torch.float16
        a, b = on_openreg(*inputs((4, 4), (4, 4)))
        assert (a @ b).dtype == torch.float16


def test_enabled_and_dtype_follow_the_regions() -> None:
    assert not torch.is_autocast_enabled("openreg")
    with torch.autocast("openreg", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("openreg")
        assert torch.get_autocast_dtype("openreg") == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
        with torch.autocast("openreg", dtype=torch.float16):
            assert torch.get_autocast_dtype("openreg") == torch.float16
        assert torch.get_autocast_dtype("openreg") == torch.bfloat16
        with torch.autocast("openreg", enabled=False):
            assert not torch.is_autocast_enabled("openreg")
            a, b = on_openreg(*inputs((4, 4), (4, 4)))
            assert (a @ b).dtype == torch.float32
        assert torch.is_autocast_enabled("openreg")
    assert not torch.is_autocast_enabled("openreg")
    assert torch.get_autocast_dtype("openreg") == torch.float16


def test_autocast_as_decorator() -> None:
    @torch.autocast("openreg", dtype=torch.bfloat16)
    def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    a, b = on_openreg(*inputs((4, 4), (4, 4)))
    assert product(a, b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32


def test_low_level_switches() -> None:
    a, b = on_openreg(*inputs((4, 4), (4, 4)))
    torch.set_autocast_enabled("openreg", True)
    torch.set_autocast_dtype("openreg", torch.bfloat16)
    try:
        assert torch.is_autocast_enabled("openreg")
        assert (a @ b).dtype == torch.bfloat16
    finally:
        torch.set_autocast_enabled("openreg", False)
        torch.set_autocast_dtype("openreg", torch.float16)
    assert (a @ b).dtype == torch.float32


def test_unsupported_dtype_disables_autocast_with_torchs_warning() -> None:
    with pytest.warns(
        UserWarning, match="In openreg autocast, but the target dtype is not supported"
    ):
        region = torch.autocast("openreg", dtype=torch.float64)
    with region:
        assert not torch.is_autocast_enabled("openreg")


def test_amp_supported_dtypes_and_bf16() -> None:
    assert torch.openreg.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.openreg.is_bf16_supported() is True
    assert torch.openreg.is_bf16_supported(including_emulation=False) is True
    assert inspect.signature(torch.openreg.is_bf16_supported).parameters.keys() == (
        inspect.signature(torch.cuda.is_bf16_supported).parameters.keys()
    )


def test_autocast_is_per_device_type_and_skips_other_tensors() -> None:
    cpu_a, cpu_b = inputs((4, 4), (4, 4))
    a, b = on_openreg(cpu_a, cpu_b)
    with torch.autocast("openreg"):
        assert (cpu_a @ cpu_b).dtype == torch.float32  # CPU tensors: not openreg's autocast
        assert (a.double() @ b.double()).dtype == torch.float64  # float64 is never cast
        a1, b1 = a.to("openreg:1"), b.to("openreg:1")
        assert (a1 @ b1).dtype == torch.float16  # every openreg device
    with torch.autocast("cpu"):
        assert (a @ b).dtype == torch.float32  # CPU autocast leaves openreg tensors alone


# ---- the policy, category by category -----------------------------------------------


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # openreg computes attention by the math path (the fused CPU kernels are not
    # reachable from another device); the reference takes the same path.
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


# (name, function, input shapes): every floating input is float32 on entry.
LOWER_PRECISION_CASES = [
    ("mm", torch.mm, [(8, 16), (16, 4)]),
    ("matmul", torch.matmul, [(2, 8, 16), (16, 4)]),
    ("bmm", torch.bmm, [(2, 8, 16), (2, 16, 4)]),
    ("addmm", torch.addmm, [(8, 4), (8, 16), (16, 4)]),
    ("baddbmm", torch.baddbmm, [(2, 8, 4), (2, 8, 16), (2, 16, 4)]),
    ("linear", F.linear, [(8, 16), (4, 16), (4,)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 8, 8), (4, 3, 3, 3), (4,)]),
    ("conv1d", F.conv1d, [(2, 3, 16), (4, 3, 3)]),
    ("prelu", F.prelu, [(4, 3, 5), (3,)]),
    ("attention", math_attention, [(2, 2, 8, 4), (2, 2, 8, 4), (2, 2, 8, 4)]),
]


@pytest.mark.parametrize("dtype", LOWER, ids=str)
@pytest.mark.parametrize("case", LOWER_PRECISION_CASES, ids=lambda c: c[0])
def test_lower_precision_ops_run_in_the_autocast_dtype(case: tuple, dtype: torch.dtype) -> None:
    _, function, shapes = case
    args = inputs(*shapes)
    result = run_autocast(function, args, dtype)
    assert result.dtype == dtype
    expected = function(*(t.to(dtype) for t in args))
    torch.testing.assert_close(result.cpu(), expected, **EXACT)


FP32_CASES = [
    ("exp", torch.exp, [(16,)]),
    ("log", torch.log, [(16,)]),
    ("rsqrt", torch.rsqrt, [(16,)]),
    ("pow", lambda x: torch.pow(x, 2), [(16,)]),
    ("softplus", F.softplus, [(16,)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (8,), w, b), [(4, 8), (8,), (8,)]),
    ("group_norm", lambda x: F.group_norm(x, 2), [(2, 4, 5)]),
    ("mse_loss", F.mse_loss, [(4, 8), (4, 8)]),
    ("l1_loss", F.l1_loss, [(4, 8), (4, 8)]),
    ("bce_with_logits", F.binary_cross_entropy_with_logits, [(4, 8), (4, 8)]),
    ("cosine_similarity", F.cosine_similarity, [(4, 8), (4, 8)]),
    ("logsumexp", lambda x: torch.logsumexp(x, 1), [(4, 8)]),
    ("cdist", torch.cdist, [(4, 8), (5, 8)]),
]


def fp32_reference(
    function: Callable[..., torch.Tensor], args: list[torch.Tensor], dtype: torch.dtype
):
    # Autocast casts the lower precision inputs up to float32: that is the reference.
    return function(*(t.to(dtype).float() for t in args))


@pytest.mark.parametrize("dtype", LOWER, ids=str)
@pytest.mark.parametrize("case", FP32_CASES, ids=lambda c: c[0])
def test_fp32_ops_run_in_float32(case: tuple, dtype: torch.dtype) -> None:
    _, function, shapes = case
    # Lower precision inputs (e.g. activations), positive so that log and rsqrt are finite.
    args = [(t.abs() + 0.5).to(dtype) for t in inputs(*shapes)]
    result = run_autocast(function, args, dtype)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), fp32_reference(function, args, dtype), **EXACT)


SET_OPT_DTYPE_CASES = [
    ("softmax", lambda x: torch.softmax(x, 1), lambda x: torch.softmax(x, 1, dtype=torch.float32)),
    (
        "log_softmax",
        lambda x: torch.log_softmax(x, 1),
        lambda x: torch.log_softmax(x, 1, dtype=torch.float32),
    ),
    ("sum", torch.sum, lambda x: torch.sum(x, dtype=torch.float32)),
    ("sum_dim", lambda x: x.sum(1), lambda x: x.sum(1, dtype=torch.float32)),
    ("cumsum", lambda x: x.cumsum(0), lambda x: x.cumsum(0, dtype=torch.float32)),
    ("prod", lambda x: x.prod(1), lambda x: x.prod(1, dtype=torch.float32)),
    (
        "vector_norm",
        torch.linalg.vector_norm,
        lambda x: torch.linalg.vector_norm(x, dtype=torch.float32),
    ),
]


@pytest.mark.parametrize("dtype", LOWER, ids=str)
@pytest.mark.parametrize("case", SET_OPT_DTYPE_CASES, ids=lambda c: c[0])
def test_fp32_set_opt_dtype_ops_compute_in_float32(case: tuple, dtype: torch.dtype) -> None:
    _, function, reference = case
    (x,) = inputs((4, 8))
    x = x.to(dtype)
    result = run_autocast(function, [x], dtype)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), reference(x), **EXACT)


def test_fp32_set_opt_dtype_respects_an_explicit_dtype() -> None:
    (x,) = on_openreg(*inputs((4, 8)))
    with torch.autocast("openreg"):
        assert torch.softmax(x.half(), 1, dtype=torch.float16).dtype == torch.float16
        assert torch.sum(x.double()).dtype == torch.float64  # not eligible: unchanged


@pytest.mark.parametrize("dtype", LOWER, ids=str)
def test_fp32_append_dtype_norm(dtype: torch.dtype) -> None:
    (x,) = inputs((4, 8))
    x = x.to(dtype)
    for call, reference in [
        (
            lambda t: torch.ops.aten.norm.Scalar(t, 2),
            lambda t: torch.ops.aten.norm.ScalarOpt_dtype(t, 2, dtype=torch.float32),
        ),
        (
            lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, 2, [1]),
            lambda t: torch.ops.aten.norm.ScalarOpt_dim_dtype(
                t, 2, [1], False, dtype=torch.float32
            ),
        ),
    ]:
        result = run_autocast(call, [x], dtype)
        assert result.dtype == torch.float32
        torch.testing.assert_close(result.cpu(), reference(x), **EXACT)


PROMOTE_CASES = [
    ("addcmul", lambda a, b, c: torch.addcmul(a, b, c), 3),
    ("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c.abs() + 1), 3),
    ("atan2", torch.atan2, 2),
    ("dot", lambda a, b: torch.dot(a.flatten(), b.flatten()), 2),
    ("cross", lambda a, b: torch.cross(a[:, :3], b[:, :3], dim=1), 2),
    ("scatter_add", lambda a, b: a.scatter_add(1, torch.zeros_like(b, dtype=torch.long), b), 2),
]


@pytest.mark.parametrize("dtype", LOWER, ids=str)
@pytest.mark.parametrize("case", PROMOTE_CASES, ids=lambda c: c[0])
def test_promote_ops_run_in_the_widest_input_type(case: tuple, dtype: torch.dtype) -> None:
    _, function, count = case
    args = inputs(*[(4, 4)] * count)
    mixed = [args[0].to(dtype), *args[1:]]  # one lower precision input, the others float32
    result = run_autocast(function, mixed, dtype)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), function(*(t.float() for t in mixed)), **EXACT)
    lowered = [t.to(dtype) for t in args]  # all lower precision: they stay so
    result = run_autocast(function, lowered, dtype)
    assert result.dtype == dtype
    torch.testing.assert_close(result.cpu(), function(*lowered), **EXACT)


def test_binary_cross_entropy_is_banned_with_cudas_message() -> None:
    p, target = on_openreg(*(t.sigmoid() for t in inputs((4, 4), (4, 4))))
    with torch.autocast("openreg"), pytest.raises(RuntimeError, match=BCE_MESSAGE) as raised:
        F.binary_cross_entropy(p, target)
    assert "binary_cross_entropy_with_logits" in str(raised.value)
    with torch.autocast("openreg"), pytest.raises(RuntimeError, match=BCE_MESSAGE):
        torch.nn.BCELoss()(p, target)
    # Outside autocast, and with autocast disabled, it is an ordinary operator.
    expected = F.binary_cross_entropy(p.cpu(), target.cpu())
    with torch.autocast("openreg", enabled=False):
        torch.testing.assert_close(F.binary_cross_entropy(p, target).cpu(), expected, **EXACT)


@pytest.mark.parametrize("dtype", LOWER, ids=str)
def test_ops_without_a_rule_fall_through(dtype: torch.dtype) -> None:
    a, b = inputs((4, 8), (4, 8))
    low = a.to(dtype)
    cases: list[tuple[Callable[..., torch.Tensor], list[torch.Tensor]]] = [
        (torch.relu, [low]),
        (torch.relu, [a]),
        (torch.add, [low, b]),  # ordinary type promotion: float32
        (torch.mul, [low, low]),
        (lambda x, y: torch.cat([x, y]), [low, b]),
        (F.gelu, [low]),
        (lambda x: x.max(1).values, [low]),
    ]
    for function, args in cases:
        result = run_autocast(function, args, dtype)
        expected = function(*args)
        assert result.dtype == expected.dtype
        torch.testing.assert_close(result.cpu(), expected, **EXACT)


# ---- the weight-cast cache -------------------------------------------------------------


class CastCounter(TorchDispatchMode):
    """Counts casts to a given dtype that reach the device (below autocast)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == self.dtype:
            self.count += 1
        return func(*args, **kwargs)


@pytest.fixture
def weight_and_inputs() -> tuple[torch.Tensor, list[torch.Tensor]]:
    weight = torch.randn(4, 8, device="openreg", requires_grad=True)  # a leaf parameter
    return weight, [torch.randn(3, 8, device="openreg") for _ in range(3)]


def count_weight_casts(
    weight: torch.Tensor, batches: list[torch.Tensor], cache_enabled: bool | None
) -> int:
    counter = CastCounter(torch.float16)
    with torch.autocast("openreg", cache_enabled=cache_enabled), counter:
        for x in batches:
            F.linear(x, weight)
    return counter.count


def test_weight_casts_are_cached_within_a_region(weight_and_inputs) -> None:
    weight, batches = weight_and_inputs
    # One cast of the weight, reused; one cast of each (non-leaf) input.
    assert count_weight_casts(weight, batches, cache_enabled=None) == 1 + len(batches)
    # The cache is dropped when the outermost region exits: the next region casts again.
    assert count_weight_casts(weight, batches, cache_enabled=True) == 1 + len(batches)


def test_cache_disabled_casts_every_time(weight_and_inputs) -> None:
    weight, batches = weight_and_inputs
    assert count_weight_casts(weight, batches, cache_enabled=False) == 2 * len(batches)


def test_global_cache_switch_is_the_default(weight_and_inputs) -> None:
    weight, batches = weight_and_inputs
    assert torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        assert count_weight_casts(weight, batches, cache_enabled=None) == 2 * len(batches)
    finally:
        torch.set_autocast_cache_enabled(True)


def test_cache_is_only_for_leaf_parameters(weight_and_inputs) -> None:
    weight, batches = weight_and_inputs
    assert count_weight_casts(weight.detach(), batches, cache_enabled=True) == 2 * len(batches)


def test_cached_weight_gradients_are_correct(weight_and_inputs) -> None:
    weight, batches = weight_and_inputs
    with torch.autocast("openreg"):
        loss = sum(F.linear(x, weight).float().sum() for x in batches)
    loss.backward()
    cpu_weight = weight.detach().cpu().requires_grad_()
    # The cache casts the weight once, so its three gradients add up in float16
    # before the one cast back: the reference casts once too.
    weight16 = cpu_weight.half()
    expected = sum(F.linear(x.cpu().half(), weight16).float().sum() for x in batches)
    expected.backward()
    assert weight.grad.dtype == torch.float32
    torch.testing.assert_close(weight.grad.cpu(), cpu_weight.grad, **EXACT)


# ---- custom autograd functions -----------------------------------------------------------


class Observed(torch.autograd.Function):
    """Records the autocast state and dtypes its forward and backward see."""

    seen: ClassVar[dict[str, object]] = {}

    @staticmethod
    @torch.amp.custom_fwd(device_type="openreg", cast_inputs=torch.float32)
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        Observed.seen["forward"] = (torch.is_autocast_enabled("openreg"), a.dtype, b.dtype)
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @torch.amp.custom_bwd(device_type="openreg")
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        Observed.seen["backward"] = (torch.is_autocast_enabled("openreg"), grad.dtype)
        return grad @ b.T, a.T @ grad


class ObservedInRegion(torch.autograd.Function):
    """custom_fwd without cast_inputs: runs under the caller's autocast state."""

    seen: ClassVar[dict[str, object]] = {}

    @staticmethod
    @torch.amp.custom_fwd(device_type="openreg")
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = a @ b
        ObservedInRegion.seen["forward"] = (torch.is_autocast_enabled("openreg"), out.dtype)
        return out

    @staticmethod
    @torch.amp.custom_bwd(device_type="openreg")
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ObservedInRegion.seen["backward"] = (
            torch.is_autocast_enabled("openreg"),
            torch.get_autocast_dtype("openreg"),
        )
        return grad, grad


def test_custom_fwd_casts_inputs_and_disables_autocast_inside() -> None:
    a, b = (t.requires_grad_() for t in on_openreg(*inputs((4, 4), (4, 4))))
    with torch.autocast("openreg"):
        out = Observed.apply(a.half(), b)
    assert Observed.seen["forward"] == (False, torch.float32, torch.float32)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert Observed.seen["backward"] == (False, torch.float32)
    # The gradient flows back through a.half(): rounded to float16 once.
    expected = (torch.ones(4, 4) @ b.detach().cpu().T).half().float()
    torch.testing.assert_close(a.grad.cpu(), expected, **EXACT)


def test_custom_bwd_runs_backward_under_the_forward_state() -> None:
    a, b = (t.requires_grad_() for t in on_openreg(*inputs((4, 4), (4, 4))))
    with torch.autocast("openreg", dtype=torch.bfloat16):
        out = ObservedInRegion.apply(a, b)
    assert ObservedInRegion.seen["forward"] == (True, torch.bfloat16)
    out.float().sum().backward()  # outside the region
    assert ObservedInRegion.seen["backward"] == (True, torch.bfloat16)
    assert not torch.is_autocast_enabled("openreg")


# ---- torch.openreg.amp: the deprecated aliases ------------------------------------------


@contextlib.contextmanager
def deprecated(replacement: str) -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    messages = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert len(messages) == 1, messages
    assert "torch.openreg.amp." in messages[0]
    assert f"Please use `{replacement}` instead." in messages[0]
    assert caught[0].filename == __file__  # points at the caller, as torch.cuda.amp's do


def test_amp_module_mirrors_torch_cuda_amp() -> None:
    import torch.openreg.amp as amp_module
    from torch.openreg.amp import GradScaler, autocast

    assert amp_module is torch.openreg.amp
    assert set(torch.cuda.amp.__all__) == set(torch.openreg.amp.__all__)
    assert issubclass(autocast, torch.amp.autocast)
    assert issubclass(GradScaler, torch.amp.GradScaler)
    assert torch.openreg.amp.amp_definitely_not_available() is False


def test_amp_autocast_is_deprecated_and_works() -> None:
    with deprecated("torch.amp.autocast('openreg', args...)"):
        region = torch.openreg.amp.autocast(dtype=torch.bfloat16)
    a, b = on_openreg(*inputs((4, 4), (4, 4)))
    with region:
        assert (a @ b).dtype == torch.bfloat16
    with deprecated("torch.amp.autocast('openreg', args...)"):
        region = torch.openreg.amp.autocast()
    with region:
        assert (a @ b).dtype == torch.float16


def test_amp_grad_scaler_is_deprecated_and_works() -> None:
    with deprecated("torch.amp.GradScaler('openreg', args...)"):
        scaler = torch.openreg.amp.GradScaler(init_scale=4.0)
    (x,) = on_openreg(*inputs((3,)))
    assert scaler.scale(x).device.type == "openreg"
    torch.testing.assert_close(scaler.scale(x).cpu(), x.cpu() * 4.0, **EXACT)


def test_amp_custom_fwd_bwd_are_deprecated_and_work() -> None:
    with deprecated("torch.amp.custom_fwd(args..., device_type='openreg')"):
        cast_to_float = torch.openreg.amp.custom_fwd(cast_inputs=torch.float32)
    with deprecated("torch.amp.custom_bwd(args..., device_type='openreg')"):
        doubled = torch.openreg.amp.custom_bwd(lambda ctx, grad: grad * 2)

    class Double(torch.autograd.Function):
        @staticmethod
        @cast_to_float
        def forward(ctx, x: torch.Tensor) -> torch.Tensor:
            assert not torch.is_autocast_enabled("openreg")
            return x * 2

        backward = staticmethod(doubled)

    (x,) = on_openreg(*inputs((4,)))
    x.requires_grad_()
    with torch.autocast("openreg"):
        out = Double.apply(x.half())
    assert out.dtype == torch.float32
    out.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 2.0), **EXACT)
