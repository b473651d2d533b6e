"""Differential operator tests: ``op(x.to("openreg")).cpu()`` equals ``op(x)`` on CPU.

Every case runs an op on CPU tensors and on copies moved to an openreg device
(``_differential.check``), and asserts that the openreg outputs stay on that
device and equal the CPU outputs: bit for bit for exact ops (``exact=True``:
arithmetic without rounding differences, comparisons, indexing, data movement),
within ``torch.testing.assert_close``'s default tolerances otherwise. Inputs
are built with ``torch.testing.make_tensor`` after ``torch.manual_seed(0)``.
Non-contiguous inputs are made on the device by the op under test itself
(``x.t()``, ``x[::2]``), since ``.to()`` would make them contiguous.

The conjugate/negative-view cases, which used to crash the process (a stack
overflow in the copy to CPU), run in a fresh interpreter, so that such a
crash fails them instead of killing the session.
"""

from __future__ import annotations

import json
import signal

import pytest
import torch
import torch.nn.functional as F
from _differential import (
    DEVICE,
    assert_matches,
    check,
    make,
    run_isolated,
    to_device,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def f(*shape, low=None, high=None):
    """float32 CPU tensor."""
    return make(*shape, low=low, high=high)


def pos(*shape):
    """Positive float32 CPU tensor (domain of log, sqrt, ...)."""
    return make(*shape, low=0.1, high=5.0)


def i64(*shape, low=-9, high=10):
    return make(*shape, dtype=torch.int64, low=low, high=high)


def i32(*shape, low=-9, high=10):
    return make(*shape, dtype=torch.int32, low=low, high=high)


def u8(*shape):
    return make(*shape, dtype=torch.uint8, low=0, high=256)


def boolean(*shape):
    return make(*shape, dtype=torch.bool)


def case(name, fn, inputs, exact=False, **options):
    """A parametrised case: `inputs` is a callable returning the argument tuple."""
    return pytest.param(fn, inputs, exact, options, id=name)


def run_case(fn, inputs, exact, options):
    check(fn, *inputs(), exact=exact, **options)


# --------------------------------------------------------------------------- unary

UNARY = [
    case("exp", torch.exp, lambda: (f(4, 5),)),
    case("log", torch.log, lambda: (pos(4, 5),)),
    case("log_of_negative_is_nan", torch.log, lambda: (f(4, 5, low=-3, high=-1),), exact=True),
    case("sqrt", torch.sqrt, lambda: (pos(4, 5),)),
    case("rsqrt", torch.rsqrt, lambda: (pos(4, 5),)),
    case("abs", torch.abs, lambda: (f(4, 5),), exact=True),
    case("abs_int", torch.abs, lambda: (i64(7),), exact=True),
    case("neg", torch.neg, lambda: (f(4, 5),), exact=True),
    case("neg_int", torch.neg, lambda: (i32(7),), exact=True),
    case("sin", torch.sin, lambda: (f(4, 5),)),
    case("cos", torch.cos, lambda: (f(4, 5),)),
    case("tanh", torch.tanh, lambda: (f(4, 5),)),
    case("sigmoid", torch.sigmoid, lambda: (f(4, 5),)),
    case("relu", torch.relu, lambda: (f(4, 5),), exact=True),
    case("gelu", F.gelu, lambda: (f(4, 5),)),
    case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), lambda: (f(4, 5),)),
    case("silu", F.silu, lambda: (f(4, 5),)),
    case("leaky_relu", lambda x: F.leaky_relu(x, 0.1), lambda: (f(4, 5),), exact=True),
    case("erf", torch.erf, lambda: (f(4, 5),)),
    case("log1p", torch.log1p, lambda: (pos(4, 5),)),
    case("expm1", torch.expm1, lambda: (f(4, 5),)),
    case("reciprocal", torch.reciprocal, lambda: (pos(4, 5),)),
    case("floor", torch.floor, lambda: (f(4, 5),), exact=True),
    case("ceil", torch.ceil, lambda: (f(4, 5),), exact=True),
    case("round", torch.round, lambda: (f(4, 5),), exact=True),
    case("round_decimals", lambda x: torch.round(x, decimals=2), lambda: (f(4, 5),)),
    case("trunc", torch.trunc, lambda: (f(4, 5),), exact=True),
    case("sign", torch.sign, lambda: (f(4, 5),), exact=True),
    case("square", torch.square, lambda: (f(4, 5),), exact=True),
    case("clamp", lambda x: torch.clamp(x, -2.0, 3.0), lambda: (f(4, 5),), exact=True),
    case("clamp_min_only", lambda x: torch.clamp(x, min=0.5), lambda: (f(4, 5),), exact=True),
    case("clamp_max_only", lambda x: torch.clamp(x, max=0.5), lambda: (f(4, 5),), exact=True),
    case("clamp_tensor_bounds", torch.clamp, lambda: (f(4, 5), f(4, 5), f(4, 5)), exact=True),
    case("clamp_int", lambda x: torch.clamp(x, -3, 4), lambda: (i64(10),), exact=True),
    case(
        "nan_to_num", torch.nan_to_num, lambda: (torch.tensor([1.0, float("nan"), -float("inf")]),)
    ),
    case(
        "isnan", torch.isnan, lambda: (torch.tensor([1.0, float("nan"), float("inf")]),), exact=True
    ),
    case(
        "isfinite",
        torch.isfinite,
        lambda: (torch.tensor([1.0, float("nan"), float("inf")]),),
        exact=True,
    ),
    case("logical_not", torch.logical_not, lambda: (boolean(9),), exact=True),
    case(
        "logical_not_float",
        torch.logical_not,
        lambda: (torch.tensor([0.0, 1.5, -0.0]),),
        exact=True,
    ),
    case("bitwise_not_int", torch.bitwise_not, lambda: (i64(9),), exact=True),
    case("bitwise_not_bool", torch.bitwise_not, lambda: (boolean(9),), exact=True),
    case("cast_float_to_int", lambda x: x.to(torch.int32), lambda: (f(4, 5),), exact=True),
    case("cast_int_to_half", lambda x: x.half(), lambda: (i64(9),), exact=True),
    case("cast_to_bool", lambda x: x.bool(), lambda: (f(4, 5),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), UNARY)
def test_unary(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# -------------------------------------------------------------------------- binary

BINARY = [
    case("add", torch.add, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("add_alpha", lambda a, b: torch.add(a, b, alpha=2.5), lambda: (f(4, 5), f(4, 5))),
    case("add_scalar", lambda a: a + 3.5, lambda: (f(4, 5),), exact=True),
    case("radd_scalar", lambda a: 3.5 + a, lambda: (f(4, 5),), exact=True),
    case("sub", torch.sub, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("rsub_scalar", lambda a: 1 - a, lambda: (f(4, 5),), exact=True),
    case("mul", torch.mul, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("div", torch.div, lambda: (f(4, 5), pos(4, 5)), exact=True),
    case(
        "div_trunc",
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda: (f(4, 5), pos(4, 5)),
        exact=True,
    ),
    case(
        "div_floor",
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda: (f(4, 5), pos(4, 5)),
        exact=True,
    ),
    case("div_int_true", torch.div, lambda: (i64(20), i64(20, low=1)), exact=True),
    case(
        "div_int_trunc",
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda: (i64(20), i64(20, low=1)),
        exact=True,
    ),
    case(
        "div_int_floor",
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda: (i64(20), i64(20, low=1)),
        exact=True,
    ),
    case("div_by_zero", torch.div, lambda: (f(6), torch.zeros(6)), exact=True),
    case("floor_divide", torch.floor_divide, lambda: (i64(20), i64(20, low=1)), exact=True),
    case("remainder", torch.remainder, lambda: (f(4, 5), pos(4, 5)), exact=True),
    case("remainder_int", torch.remainder, lambda: (i64(20), i64(20, low=1)), exact=True),
    case("fmod", torch.fmod, lambda: (f(4, 5), pos(4, 5)), exact=True),
    case("pow_tensor", torch.pow, lambda: (pos(4, 5), f(4, 5, low=-2, high=2))),
    case("pow_scalar_exponent", lambda a: torch.pow(a, 3), lambda: (f(4, 5),)),
    case("pow_half_exponent", lambda a: a**0.5, lambda: (pos(4, 5),)),
    case("pow_scalar_base", lambda a: torch.pow(2.0, a), lambda: (f(4, 5),)),
    case(
        "pow_int", torch.pow, lambda: (i64(10, low=-3, high=4), i64(10, low=0, high=5)), exact=True
    ),
    case("atan2", torch.atan2, lambda: (f(4, 5), f(4, 5))),
    case("maximum", torch.maximum, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("minimum", torch.minimum, lambda: (f(4, 5), f(4, 5)), exact=True),
    case(
        "maximum_nan",
        torch.maximum,
        lambda: (torch.tensor([1.0, float("nan")]), torch.tensor([float("nan"), 2.0])),
        exact=True,
    ),
    case(
        "fmax",
        torch.fmax,
        lambda: (torch.tensor([1.0, float("nan")]), torch.tensor([float("nan"), 2.0])),
        exact=True,
    ),
    case("eq", torch.eq, lambda: (i64(30, low=0, high=3), i64(30, low=0, high=3)), exact=True),
    case("ne", torch.ne, lambda: (i64(30, low=0, high=3), i64(30, low=0, high=3)), exact=True),
    case("lt", torch.lt, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("le", torch.le, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("gt", torch.gt, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("ge", torch.ge, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("gt_scalar", lambda a: a > 0.25, lambda: (f(4, 5),), exact=True),
    case("eq_scalar_int", lambda a: a == 3, lambda: (i64(30, low=0, high=5),), exact=True),
    case("isclose", torch.isclose, lambda: (f(10), f(10)), exact=True),
    case("equal", torch.equal, lambda: (i64(10), i64(10)), exact=True),
    case("allclose", torch.allclose, lambda: (f(10), f(10)), exact=True),
    case("logical_and", torch.logical_and, lambda: (boolean(20), boolean(20)), exact=True),
    case("logical_or", torch.logical_or, lambda: (boolean(20), boolean(20)), exact=True),
    case("logical_xor", torch.logical_xor, lambda: (boolean(20), boolean(20)), exact=True),
    case("logical_and_float", torch.logical_and, lambda: (f(20), f(20)), exact=True),
    case(
        "bitwise_and_int64",
        torch.bitwise_and,
        lambda: (i64(20, low=-100, high=100), i64(20, low=-100, high=100)),
        exact=True,
    ),
    case(
        "bitwise_or_int32",
        torch.bitwise_or,
        lambda: (i32(20, low=-100, high=100), i32(20, low=-100, high=100)),
        exact=True,
    ),
    case("bitwise_xor_uint8", torch.bitwise_xor, lambda: (u8(20), u8(20)), exact=True),
    case("bitwise_and_bool", torch.bitwise_and, lambda: (boolean(20), boolean(20)), exact=True),
    case(
        "bitwise_left_shift",
        torch.bitwise_left_shift,
        lambda: (i64(20, low=0, high=100), i64(20, low=0, high=8)),
        exact=True,
    ),
    case(
        "bitwise_right_shift",
        torch.bitwise_right_shift,
        lambda: (i32(20, low=-100, high=100), i32(20, low=0, high=8)),
        exact=True,
    ),
    case(
        "bitwise_and_scalar", lambda a: a & 0x0F, lambda: (i64(20, low=0, high=1000),), exact=True
    ),
    case("where", torch.where, lambda: (boolean(4, 5), f(4, 5), f(4, 5)), exact=True),
    case(
        "where_scalars",
        lambda c, a: torch.where(c, a, 0.0),
        lambda: (boolean(4, 5), f(4, 5)),
        exact=True,
    ),
    case("where_broadcast", torch.where, lambda: (boolean(4, 1), f(1, 5), f(4, 5)), exact=True),
    case("where_condition_only", torch.where, lambda: (boolean(4, 5),), exact=True),
    case("lerp", torch.lerp, lambda: (f(4, 5), f(4, 5), f(4, 5))),
    case(
        "addcmul",
        lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
        lambda: (f(4, 5), f(4, 5), f(4, 5)),
    ),
    case(
        "addcdiv",
        lambda a, b, c: torch.addcdiv(a, b, c, value=0.5),
        lambda: (f(4, 5), f(4, 5), pos(4, 5)),
    ),
    case("hypot", torch.hypot, lambda: (f(4, 5), f(4, 5))),
    case("copysign", torch.copysign, lambda: (f(4, 5), f(4, 5)), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), BINARY)
def test_binary(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------------ broadcasting and promotion

PROMOTION = [
    case("broadcast_row_col", torch.add, lambda: (f(4, 1), f(1, 5)), exact=True),
    case("broadcast_3d", torch.mul, lambda: (f(3, 1, 5), f(4, 1)), exact=True),
    case("broadcast_0dim", torch.sub, lambda: (f(4, 5), f()), exact=True),
    case("broadcast_size1_both", torch.maximum, lambda: (f(1, 3, 1), f(2, 1, 4)), exact=True),
    case("broadcast_expand", lambda a: a.expand(3, 4, 5) * 2, lambda: (f(4, 1),), exact=True),
    case("int_plus_float", torch.add, lambda: (i64(4, 5), f(4, 5)), exact=True),
    case("int32_plus_int64", torch.add, lambda: (i32(4, 5), i64(4, 5)), exact=True),
    case("uint8_plus_int8", torch.add, lambda: (u8(10), make(10, dtype=torch.int8)), exact=True),
    case("bool_plus_int", torch.add, lambda: (boolean(10), i64(10)), exact=True),
    case("int_times_python_float", lambda a: a * 1.5, lambda: (i64(10),), exact=True),
    case("int_div_python_int", lambda a: a / 3, lambda: (i64(10),), exact=True),
    case(
        "float32_plus_float64_0dim",
        torch.add,
        lambda: (f(4, 5), torch.tensor(1.25, dtype=torch.float64)),
        exact=True,
    ),
    case("int_plus_float_0dim", torch.add, lambda: (i64(4, 5), torch.tensor(0.5)), exact=True),
    case(
        "float16_add",
        torch.add,
        lambda: (make(4, 5, dtype=torch.float16), make(4, 5, dtype=torch.float16)),
        exact=True,
    ),
    case(
        "float16_plus_float32",
        torch.add,
        lambda: (make(4, 5, dtype=torch.float16), f(4, 5)),
        exact=True,
    ),
    case("float16_exp", torch.exp, lambda: (make(4, 5, dtype=torch.float16),)),
    case(
        "float16_matmul",
        torch.matmul,
        lambda: (make(4, 5, dtype=torch.float16), make(5, 3, dtype=torch.float16)),
    ),
    case("float16_sum", torch.sum, lambda: (make(50, dtype=torch.float16),)),
    case(
        "bfloat16_mul",
        torch.mul,
        lambda: (make(4, 5, dtype=torch.bfloat16), make(4, 5, dtype=torch.bfloat16)),
        exact=True,
    ),
    case(
        "bfloat16_plus_int",
        torch.add,
        lambda: (make(4, 5, dtype=torch.bfloat16), i64(4, 5)),
        exact=True,
    ),
    case(
        "bfloat16_softmax",
        lambda a: torch.softmax(a, -1),
        lambda: (make(4, 5, dtype=torch.bfloat16),),
    ),
    case("bfloat16_mean", torch.mean, lambda: (make(4, 5, dtype=torch.bfloat16),)),
    case(
        "float64_ops",
        lambda a, b: (a * b + a.exp()).sum(0),
        lambda: (make(4, 5, dtype=torch.float64), make(4, 5, dtype=torch.float64)),
    ),
    case(
        "result_type",
        lambda a, b: (a + b).dtype,
        lambda: (i32(3), make(3, dtype=torch.float16)),
        exact=True,
    ),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), PROMOTION)
def test_broadcasting_and_type_promotion(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ---------------------------------------------------------------------- reductions

REDUCTIONS = [
    case("sum", torch.sum, lambda: (f(6, 7),)),
    case("sum_dim", lambda x: x.sum(1), lambda: (f(6, 7),)),
    case("sum_dims_keepdim", lambda x: x.sum((0, 2), keepdim=True), lambda: (f(3, 4, 5),)),
    case("sum_dtype", lambda x: x.sum(dtype=torch.float64), lambda: (f(6, 7),)),
    case("sum_int", torch.sum, lambda: (i64(6, 7),), exact=True),
    case("sum_bool", torch.sum, lambda: (boolean(30),), exact=True),
    case("sum_large", torch.sum, lambda: (f(100_000),)),
    case("mean", torch.mean, lambda: (f(6, 7),)),
    case("mean_dim_keepdim", lambda x: x.mean(-1, keepdim=True), lambda: (f(6, 7),)),
    case("nansum", torch.nansum, lambda: (torch.tensor([1.0, float("nan"), 2.0]),)),
    case("prod", torch.prod, lambda: (f(3, 4, low=0.5, high=1.5),)),
    case("prod_dim", lambda x: x.prod(0), lambda: (i64(3, 4, low=-3, high=4),), exact=True),
    case("max", torch.max, lambda: (f(6, 7),), exact=True),
    case("max_dim", lambda x: torch.max(x, 1), lambda: (f(6, 7),), exact=True),
    case(
        "max_dim_keepdim", lambda x: torch.max(x, 0, keepdim=True), lambda: (f(6, 7),), exact=True
    ),
    case("min_dim", lambda x: torch.min(x, -1), lambda: (i64(6, 7),), exact=True),
    case("amax", lambda x: torch.amax(x, (0, 1)), lambda: (f(3, 4, 5),), exact=True),
    case("aminmax", lambda x: torch.aminmax(x, dim=1), lambda: (f(6, 7),), exact=True),
    case("argmax", torch.argmax, lambda: (f(6, 7),), exact=True),
    case(
        "argmax_dim_keepdim",
        lambda x: torch.argmax(x, 1, keepdim=True),
        lambda: (f(6, 7),),
        exact=True,
    ),
    case("argmin_dim", lambda x: torch.argmin(x, 0), lambda: (f(6, 7),), exact=True),
    case("std", torch.std, lambda: (f(6, 7),)),
    case("std_dim_correction0", lambda x: torch.std(x, 1, correction=0), lambda: (f(6, 7),)),
    case("var_dim_keepdim", lambda x: torch.var(x, 0, keepdim=True), lambda: (f(6, 7),)),
    case("var_mean", lambda x: torch.var_mean(x, 1), lambda: (f(6, 7),)),
    case("norm", torch.norm, lambda: (f(6, 7),)),
    case("norm_p1_dim", lambda x: torch.norm(x, p=1, dim=1), lambda: (f(6, 7),)),
    case(
        "linalg_vector_norm_inf",
        lambda x: torch.linalg.vector_norm(x, float("inf")),
        lambda: (f(6, 7),),
    ),
    case("linalg_matrix_norm_fro", torch.linalg.matrix_norm, lambda: (f(6, 7),)),
    case("logsumexp", lambda x: torch.logsumexp(x, 1), lambda: (f(6, 7),)),
    case("logsumexp_keepdim", lambda x: torch.logsumexp(x, 0, keepdim=True), lambda: (f(6, 7),)),
    case("cumsum", lambda x: torch.cumsum(x, 1), lambda: (f(6, 7),)),
    case("cumsum_int", lambda x: torch.cumsum(x, 0), lambda: (i64(20),), exact=True),
    case("cumprod", lambda x: torch.cumprod(x, 0), lambda: (f(6, low=0.5, high=1.5),)),
    case("cummax", lambda x: torch.cummax(x, 0), lambda: (f(10),), exact=True),
    case("any", torch.any, lambda: (boolean(6, 7),), exact=True),
    case(
        "any_dim_keepdim",
        lambda x: torch.any(x, 1, keepdim=True),
        lambda: (boolean(6, 7),),
        exact=True,
    ),
    case("all", torch.all, lambda: (boolean(6, 7),), exact=True),
    case("all_dim", lambda x: torch.all(x, 0), lambda: (boolean(6, 7),), exact=True),
    case("any_float", torch.any, lambda: (torch.zeros(5),), exact=True),
    case(
        "count_nonzero",
        lambda x: torch.count_nonzero(x, 0),
        lambda: (i64(6, 7, low=0, high=2),),
        exact=True,
    ),
    case("median", torch.median, lambda: (f(7),), exact=True),
    case("median_dim", lambda x: torch.median(x, 1), lambda: (f(4, 7),), exact=True),
    case("mode", lambda x: torch.mode(x, 0), lambda: (i64(15, low=0, high=4),), exact=True),
    case("quantile", lambda x: torch.quantile(x, 0.3), lambda: (f(20),)),
    case("bincount", torch.bincount, lambda: (i64(30, low=0, high=7),), exact=True),
    case("histc", lambda x: torch.histc(x, bins=5, min=-5, max=5), lambda: (f(50),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), REDUCTIONS)
def test_reductions(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------------------------------ indexing


def setitem(index, value):
    def fn(x, *tensors):
        x = x.clone()
        resolved = tensors[0] if index == "tensor" else index
        assigned = tensors[-1] if value == "tensor" else value
        x[resolved] = assigned
        return x

    return fn


INDEXING = [
    case("getitem_int", lambda x: x[2], lambda: (f(5, 6),), exact=True),
    case("getitem_negative_int", lambda x: x[-1, -2], lambda: (f(5, 6),), exact=True),
    case("getitem_slice", lambda x: x[1:4], lambda: (f(5, 6),), exact=True),
    case("getitem_slice_step", lambda x: x[::2, 1::3], lambda: (f(5, 6),), exact=True),
    case("getitem_ellipsis_none", lambda x: x[..., None, 1], lambda: (f(3, 4, 5),), exact=True),
    case("getitem_bool_mask", lambda x, m: x[m], lambda: (f(5, 6), boolean(5, 6)), exact=True),
    case("getitem_bool_row_mask", lambda x, m: x[m], lambda: (f(5, 6), boolean(5)), exact=True),
    case(
        "getitem_long_index",
        lambda x, i: x[i],
        lambda: (f(5, 6), i64(7, low=0, high=5)),
        exact=True,
    ),
    case(
        "getitem_negative_long_index",
        lambda x, i: x[i],
        lambda: (f(5, 6), i64(7, low=-5, high=0)),
        exact=True,
    ),
    case(
        "getitem_two_long_indices",
        lambda x, i, j: x[i, j],
        lambda: (f(5, 6), i64(4, low=0, high=5), i64(4, low=0, high=6)),
        exact=True,
    ),
    case(
        "getitem_index_then_slice",
        lambda x, i: x[i, 1:3],
        lambda: (f(5, 6), i64(3, low=0, high=5)),
        exact=True,
    ),
    case(
        "getitem_slice_then_index",
        lambda x, i: x[:, i],
        lambda: (f(5, 6), i64(3, low=0, high=6)),
        exact=True,
    ),
    case(
        "getitem_separated_indices",
        lambda x, i, j: x[i, :, j],
        lambda: (f(3, 4, 5), i64(2, low=0, high=3), i64(2, low=0, high=5)),
        exact=True,
    ),
    case(
        "getitem_2d_index",
        lambda x, i: x[i],
        lambda: (f(5, 6), i64(2, 3, low=0, high=5)),
        exact=True,
    ),
    case("setitem_int_scalar", setitem(1, 7.0), lambda: (f(5, 6),), exact=True),
    case(
        "setitem_slice_tensor",
        setitem((slice(1, 3), slice(None, None, 2)), "tensor"),
        lambda: (f(5, 6), f(2, 3)),
        exact=True,
    ),
    case(
        "setitem_bool_mask_scalar",
        setitem("tensor", -1.0),
        lambda: (f(5, 6), boolean(5, 6)),
        exact=True,
    ),
    case(
        "setitem_long_index_tensor",
        setitem("tensor", "tensor"),
        lambda: (f(5, 6), torch.tensor([0, 3]), f(2, 6)),
        exact=True,
    ),
    case(
        "setitem_broadcast_row", setitem(slice(None), "tensor"), lambda: (f(5, 6), f(6)), exact=True
    ),
    case(
        "index_select",
        lambda x, i: torch.index_select(x, 1, i),
        lambda: (f(5, 6), i64(4, low=0, high=6)),
        exact=True,
    ),
    case(
        "gather",
        lambda x, i: torch.gather(x, 1, i),
        lambda: (f(5, 6), i64(5, 3, low=0, high=6)),
        exact=True,
    ),
    case(
        "scatter_src",
        lambda x, i, s: x.scatter(0, i, s),
        lambda: (f(5, 6), torch.tensor([[0, 1, 2, 3, 4, 0]]), f(1, 6)),
        exact=True,
    ),
    case(
        "scatter_value",
        lambda x, i: x.scatter(1, i, 9.0),
        lambda: (f(5, 6), torch.tensor([[0], [2], [4], [1], [5]])),
        exact=True,
    ),
    case(
        "scatter_add",
        lambda x, i, s: x.scatter_add(0, i, s),
        lambda: (f(3, 4), i64(6, 4, low=0, high=3), f(6, 4)),
        exact=True,
    ),
    case(
        "scatter_reduce_amax",
        lambda x, i, s: x.scatter_reduce(0, i, s, "amax"),
        lambda: (f(3, 4), i64(6, 4, low=0, high=3), f(6, 4)),
        exact=True,
    ),
    case(
        "index_put",
        lambda x, i, v: x.index_put((i,), v),
        lambda: (f(5, 6), torch.tensor([4, 0]), f(2, 6)),
        exact=True,
    ),
    case(
        "index_put_accumulate",
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (f(5), torch.tensor([1, 1, 3, 1]), f(4)),
    ),
    case(
        "index_put__in_place",
        lambda x, i, j, v: x.index_put_((i, j), v),
        lambda: (f(5, 6), torch.tensor([0, 2]), torch.tensor([5, 1]), f(2)),
        exact=True,
    ),
    case(
        "index_add",
        lambda x, i, s: x.index_add(0, i, s, alpha=2),
        lambda: (f(5, 3), torch.tensor([0, 4, 0]), f(3, 3)),
        exact=True,
    ),
    case(
        "index_copy",
        lambda x, i, s: x.index_copy(0, i, s),
        lambda: (f(5, 3), torch.tensor([4, 1]), f(2, 3)),
        exact=True,
    ),
    case(
        "index_fill",
        lambda x, i: x.index_fill(1, i, -2.0),
        lambda: (f(5, 3), torch.tensor([0, 2])),
        exact=True,
    ),
    case(
        "masked_fill",
        lambda x, m: x.masked_fill(m, 0.5),
        lambda: (f(5, 6), boolean(5, 6)),
        exact=True,
    ),
    case(
        "masked_fill_broadcast_mask",
        lambda x, m: x.masked_fill(m, -1.0),
        lambda: (f(5, 6), boolean(6)),
        exact=True,
    ),
    case(
        "masked_fill_tensor_value",
        lambda x, m, v: x.masked_fill(m, v),
        lambda: (f(5, 6), boolean(5, 6), f()),
        exact=True,
    ),
    case("masked_select", torch.masked_select, lambda: (f(5, 6), boolean(5, 6)), exact=True),
    case(
        "masked_scatter",
        lambda x, m, s: x.masked_scatter(m, s),
        lambda: (f(5, 6), boolean(5, 6), f(30)),
        exact=True,
    ),
    case("nonzero", torch.nonzero, lambda: (i64(5, 6, low=0, high=2),), exact=True),
    case(
        "nonzero_as_tuple",
        lambda x: torch.nonzero(x, as_tuple=True),
        lambda: (boolean(3, 4, 5),),
        exact=True,
    ),
    case("nonzero_none", torch.nonzero, lambda: (torch.zeros(4, 4),), exact=True),
    case("argwhere", torch.argwhere, lambda: (boolean(4, 5),), exact=True),
    case("take", torch.take, lambda: (f(5, 6), i64(2, 4, low=-30, high=30)), exact=True),
    case(
        "take_along_dim",
        lambda x, i: torch.take_along_dim(x, i, 1),
        lambda: (f(5, 6), i64(5, 2, low=0, high=6)),
        exact=True,
    ),
    case("narrow", lambda x: x.narrow(1, 2, 3), lambda: (f(5, 6),), exact=True),
    case(
        "select_scatter",
        lambda x, s: torch.select_scatter(x, s, 0, 1),
        lambda: (f(5, 6), f(6)),
        exact=True,
    ),
    case(
        "slice_scatter",
        lambda x, s: torch.slice_scatter(x, s, 1, 0, 6, 2),
        lambda: (f(5, 6), f(5, 3)),
        exact=True,
    ),
    case("diagonal", lambda x: torch.diagonal(x, 1), lambda: (f(5, 6),), exact=True),
    case(
        "tril_triu", lambda x: (torch.tril(x, -1), torch.triu(x, 1)), lambda: (f(5, 6),), exact=True
    ),
    case(
        "searchsorted", torch.searchsorted, lambda: (torch.arange(0.0, 10.0, 0.5), f(7)), exact=True
    ),
    case(
        "bucketize",
        lambda x, b: torch.bucketize(x, b, right=True),
        lambda: (f(10), torch.tensor([-2.0, 0.0, 3.0])),
        exact=True,
    ),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), INDEXING)
def test_indexing(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


def test_getitem_with_cpu_long_index():
    """CUDA accepts host index tensors; openreg must too."""
    x, index = f(5, 6), torch.tensor([4, 0, 4])
    actual = x.to(DEVICE)[index]
    assert_matches(actual, x[index], exact=True)


def test_setitem_with_cpu_bool_mask():
    x, mask = f(5, 6), boolean(5, 6)
    device = x.to(DEVICE)
    device[mask] = 3.0
    x[mask] = 3.0
    assert_matches(device, x, exact=True)


def test_index_put_with_cpu_indices_in_place():
    x, index, values = f(5, 6), torch.tensor([1, 3]), f(2, 6)
    device = x.to(DEVICE)
    result = device.index_put_((index,), values.to(DEVICE))
    assert result is device
    x.index_put_((index,), values)
    assert_matches(device, x, exact=True)


# -------------------------------------------------------------------- linear algebra

MATMUL = [
    case("mm", torch.mm, lambda: (f(4, 5), f(5, 3))),
    case("mm_transposed", lambda a, b: torch.mm(a.t(), b.t()), lambda: (f(5, 4), f(3, 5))),
    case("bmm", torch.bmm, lambda: (f(2, 4, 5), f(2, 5, 3))),
    case("matmul_broadcast", torch.matmul, lambda: (f(2, 1, 3, 4), f(5, 4, 2))),
    case("matmul_vector_matrix", torch.matmul, lambda: (f(4), f(4, 3))),
    case("matmul_matrix_vector", torch.matmul, lambda: (f(3, 4), f(4))),
    case("matmul_vectors", torch.matmul, lambda: (f(4), f(4))),
    case("matmul_batched_vector", torch.matmul, lambda: (f(2, 3, 4), f(4))),
    case("matmul_int", torch.matmul, lambda: (i64(3, 4), i64(4, 2)), exact=True),
    case("matmul_operator", lambda a, b: a @ b, lambda: (f(6, 6), f(6, 6))),
    case("mv", torch.mv, lambda: (f(3, 4), f(4))),
    case("dot", torch.dot, lambda: (f(7), f(7))),
    case("outer", torch.outer, lambda: (f(3), f(4)), exact=True),
    case(
        "addmm",
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
        lambda: (f(4, 3), f(4, 5), f(5, 3)),
    ),
    case("addmm_broadcast_bias", torch.addmm, lambda: (f(3), f(4, 5), f(5, 3))),
    case("baddbmm", torch.baddbmm, lambda: (f(2, 4, 3), f(2, 4, 5), f(2, 5, 3))),
    case("addmv", torch.addmv, lambda: (f(3), f(3, 4), f(4))),
    case("einsum_matmul", lambda a, b: torch.einsum("ij,jk->ik", a, b), lambda: (f(4, 5), f(5, 3))),
    case("einsum_batched_trace", lambda a: torch.einsum("bii->b", a), lambda: (f(3, 4, 4),)),
    case(
        "einsum_outer_sum", lambda a, b: torch.einsum("bi,bj->ij", a, b), lambda: (f(5, 3), f(5, 4))
    ),
    case("linear", F.linear, lambda: (f(2, 3, 5), f(4, 5), f(4))),
    case("linear_no_bias", F.linear, lambda: (f(6, 5), f(4, 5))),
    case(
        "tensordot",
        lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])),
        lambda: (f(2, 3, 4), f(3, 4, 5)),
    ),
    case("kron", torch.kron, lambda: (f(2, 3), f(2, 2)), exact=True),
    case("trace", torch.trace, lambda: (f(5, 5),)),
    case("cross", lambda a, b: torch.linalg.cross(a, b), lambda: (f(4, 3), f(4, 3))),
    case("cdist", torch.cdist, lambda: (f(4, 3), f(5, 3)), rtol=1e-4, atol=1e-5),
    case(
        "linalg_solve",
        torch.linalg.solve,
        lambda: (f(4, 4) + 4 * torch.eye(4), f(4, 2)),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "linalg_inv", torch.linalg.inv, lambda: (f(4, 4) + 4 * torch.eye(4),), rtol=1e-4, atol=1e-5
    ),
    case("det", torch.linalg.det, lambda: (f(3, 3),), rtol=1e-4, atol=1e-5),
    case(
        "cholesky",
        lambda a: torch.linalg.cholesky(a @ a.T + torch.eye(4, device=a.device)),
        lambda: (f(4, 4),),
        rtol=1e-4,
        atol=1e-5,
    ),
    case("qr", torch.linalg.qr, lambda: (f(5, 3),), rtol=1e-4, atol=1e-5),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), MATMUL)
def test_matmul_family(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------------------ convolution, pooling

CONV = [
    case("conv1d", F.conv1d, lambda: (f(2, 3, 10), f(4, 3, 3), f(4))),
    case(
        "conv1d_stride_padding",
        lambda x, w: F.conv1d(x, w, stride=2, padding=1),
        lambda: (f(2, 3, 10), f(4, 3, 3)),
    ),
    case("conv2d", F.conv2d, lambda: (f(2, 3, 8, 8), f(4, 3, 3, 3), f(4))),
    case(
        "conv2d_stride_padding_dilation",
        lambda x, w: F.conv2d(x, w, stride=2, padding=2, dilation=2),
        lambda: (f(1, 3, 9, 9), f(5, 3, 3, 3)),
    ),
    case(
        "conv2d_groups",
        lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2),
        lambda: (f(2, 4, 6, 6), f(6, 2, 3, 3), f(6)),
    ),
    case(
        "conv2d_depthwise",
        lambda x, w: F.conv2d(x, w, groups=4),
        lambda: (f(1, 4, 5, 5), f(4, 1, 3, 3)),
    ),
    case(
        "conv2d_padding_same",
        lambda x, w: F.conv2d(x, w, padding="same"),
        lambda: (f(1, 2, 6, 6), f(3, 2, 3, 3)),
    ),
    case("conv_transpose2d", F.conv_transpose2d, lambda: (f(2, 4, 5, 5), f(4, 3, 3, 3), f(3))),
    case(
        "conv_transpose2d_stride_output_padding",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
        lambda: (f(1, 4, 5, 5), f(4, 2, 3, 3)),
    ),
    case(
        "conv_transpose2d_groups",
        lambda x, w: F.conv_transpose2d(x, w, groups=2),
        lambda: (f(1, 4, 5, 5), f(4, 3, 3, 3)),
    ),
    case(
        "conv2d_module",
        lambda x: torch.nn.Conv2d(3, 2, 3).to(x.device)(x),
        lambda: (f(1, 3, 6, 6),),
        seed=0,
    ),
]

POOLING = [
    case("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda: (f(2, 3, 8, 8),), exact=True),
    case(
        "max_pool2d_stride_padding",
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
        lambda: (f(2, 3, 9, 9),),
        exact=True,
    ),
    case(
        "max_pool2d_indices",
        lambda x: F.max_pool2d(x, 2, return_indices=True),
        lambda: (f(1, 2, 6, 6),),
        exact=True,
    ),
    case(
        "max_pool2d_ceil_mode",
        lambda x: F.max_pool2d(x, 2, ceil_mode=True),
        lambda: (f(1, 2, 7, 7),),
        exact=True,
    ),
    case("max_pool1d", lambda x: F.max_pool1d(x, 3, stride=2), lambda: (f(2, 3, 11),), exact=True),
    case("avg_pool2d", lambda x: F.avg_pool2d(x, 2), lambda: (f(2, 3, 8, 8),)),
    case(
        "avg_pool2d_padding_no_count_pad",
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        lambda: (f(2, 3, 9, 9),),
    ),
    case(
        "adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), lambda: (f(2, 3, 8, 7),)
    ),
    case(
        "adaptive_avg_pool2d_global",
        lambda x: F.adaptive_avg_pool2d(x, 1),
        lambda: (f(2, 3, 8, 7),),
    ),
    case(
        "adaptive_max_pool2d",
        lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
        lambda: (f(1, 2, 7, 8),),
        exact=True,
    ),
    case(
        "interpolate_nearest",
        lambda x: F.interpolate(x, scale_factor=2),
        lambda: (f(1, 2, 3, 4),),
        exact=True,
    ),
    case(
        "interpolate_bilinear",
        lambda x: F.interpolate(x, size=(5, 7), mode="bilinear"),
        lambda: (f(1, 2, 3, 4),),
    ),
    case(
        "pad_reflect",
        lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"),
        lambda: (f(1, 2, 4, 5),),
        exact=True,
    ),
    case("pad_constant", lambda x: F.pad(x, (1, 1), value=3.0), lambda: (f(2, 3),), exact=True),
    case("unfold_im2col", lambda x: F.unfold(x, 2, stride=2), lambda: (f(1, 2, 4, 4),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), CONV)
def test_convolution(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), POOLING)
def test_pooling(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# -------------------------------------------------------------------- normalisation

NORMS = [
    case(
        "layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b), lambda: (f(4, 5, 6), f(6), f(6))
    ),
    case("layer_norm_no_affine", lambda x: F.layer_norm(x, (5, 6)), lambda: (f(4, 5, 6),)),
    case(
        "batch_norm_eval",
        lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
        lambda: (f(4, 3, 5), f(3), pos(3), f(3), f(3)),
    ),
    case(
        "group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), lambda: (f(2, 4, 3, 3), f(4), f(4))
    ),
    case("instance_norm", F.instance_norm, lambda: (f(2, 3, 5, 5),)),
    case("rms_norm", lambda x, w: F.rms_norm(x, (6,), w), lambda: (f(4, 6), f(6))),
    case("normalize", F.normalize, lambda: (f(4, 6),)),
    case("local_response_norm", lambda x: F.local_response_norm(x, 2), lambda: (f(1, 4, 3, 3),)),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), NORMS)
def test_normalization(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


@pytest.mark.parametrize("momentum", [0.1, 0.7])
def test_batch_norm_training_updates_running_stats(momentum):
    """The running statistics (optional mutable arguments) are updated in place."""

    def fn(x, mean, var, weight, bias):
        out = F.batch_norm(x, mean, var, weight, bias, training=True, momentum=momentum)
        return out, mean, var

    check(fn, f(8, 3, 4), torch.zeros(3), torch.ones(3), f(3), f(3))


def test_batch_norm_training_without_running_stats():
    check(lambda x: F.batch_norm(x, None, None, training=True), f(8, 3, 4))


def test_batch_norm_module_training_and_eval():
    def fn(x):
        torch.manual_seed(1)
        module = torch.nn.BatchNorm2d(3).to(x.device)
        train = module(x)
        module.eval()
        return train, module(x), module.running_mean, module.running_var, module.num_batches_tracked

    check(fn, f(4, 3, 2, 2))


# --------------------------------------------------------------------------- losses


def probabilities(*shape):
    return torch.softmax(f(*shape), dim=-1)


LOSSES = [
    case("mse", F.mse_loss, lambda: (f(4, 5), f(4, 5))),
    case("mse_sum", lambda a, b: F.mse_loss(a, b, reduction="sum"), lambda: (f(4, 5), f(4, 5))),
    case(
        "mse_none",
        lambda a, b: F.mse_loss(a, b, reduction="none"),
        lambda: (f(4, 5), f(4, 5)),
        exact=True,
    ),
    case("l1", F.l1_loss, lambda: (f(4, 5), f(4, 5))),
    case("cross_entropy", F.cross_entropy, lambda: (f(6, 5), i64(6, low=0, high=5))),
    case(
        "cross_entropy_weight",
        lambda x, t, w: F.cross_entropy(x, t, weight=w),
        lambda: (f(6, 5), i64(6, low=0, high=5), pos(5)),
    ),
    case(
        "cross_entropy_label_smoothing",
        lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2),
        lambda: (f(6, 5), i64(6, low=0, high=5)),
    ),
    case(
        "cross_entropy_weight_label_smoothing",
        lambda x, t, w: F.cross_entropy(x, t, weight=w, label_smoothing=0.1),
        lambda: (f(6, 5), i64(6, low=0, high=5), pos(5)),
    ),
    case(
        "cross_entropy_ignore_index",
        lambda x, t: F.cross_entropy(x, t, ignore_index=1),
        lambda: (f(6, 5), torch.tensor([0, 1, 2, 1, 4, 3])),
    ),
    case("cross_entropy_probabilities", F.cross_entropy, lambda: (f(6, 5), probabilities(6, 5))),
    case(
        "cross_entropy_spatial",
        F.cross_entropy,
        lambda: (f(2, 5, 3, 3), i64(2, 3, 3, low=0, high=5)),
    ),
    case(
        "cross_entropy_none",
        lambda x, t: F.cross_entropy(x, t, reduction="none"),
        lambda: (f(6, 5), i64(6, low=0, high=5)),
    ),
    case("nll", F.nll_loss, lambda: (torch.log_softmax(f(6, 5), 1), i64(6, low=0, high=5))),
    case(
        "nll_weight_sum",
        lambda x, t, w: F.nll_loss(x, t, weight=w, reduction="sum"),
        lambda: (torch.log_softmax(f(6, 5), 1), i64(6, low=0, high=5), pos(5)),
    ),
    case("bce", F.binary_cross_entropy, lambda: (torch.sigmoid(f(4, 5)), torch.rand(4, 5))),
    case(
        "bce_weight",
        lambda x, t, w: F.binary_cross_entropy(x, t, weight=w),
        lambda: (torch.sigmoid(f(4, 5)), torch.rand(4, 5), pos(5)),
    ),
    case(
        "bce_with_logits", F.binary_cross_entropy_with_logits, lambda: (f(4, 5), torch.rand(4, 5))
    ),
    case(
        "bce_with_logits_pos_weight",
        lambda x, t, p: F.binary_cross_entropy_with_logits(x, t, pos_weight=p),
        lambda: (f(4, 5), torch.rand(4, 5), pos(5)),
    ),
    case("smooth_l1", F.smooth_l1_loss, lambda: (f(4, 5), f(4, 5))),
    case(
        "smooth_l1_beta", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), lambda: (f(4, 5), f(4, 5))
    ),
    case("huber", lambda a, b: F.huber_loss(a, b, delta=0.7), lambda: (f(4, 5), f(4, 5))),
    case(
        "kl_div",
        lambda a, b: F.kl_div(a, b, reduction="batchmean"),
        lambda: (torch.log_softmax(f(4, 5), 1), probabilities(4, 5)),
    ),
    case(
        "kl_div_log_target",
        lambda a, b: F.kl_div(a, b, reduction="sum", log_target=True),
        lambda: (torch.log_softmax(f(4, 5), 1), torch.log_softmax(f(4, 5), 1)),
    ),
    case(
        "margin_ranking",
        F.margin_ranking_loss,
        lambda: (f(6), f(6), torch.tensor([1.0, -1, 1, -1, 1, 1])),
    ),
    case("cosine_similarity", F.cosine_similarity, lambda: (f(4, 5), f(4, 5))),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), LOSSES)
def test_losses(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------------------- softmax, sort, shape

SOFTMAX_SORT = [
    case("softmax", lambda x: torch.softmax(x, 1), lambda: (f(4, 7),)),
    case("softmax_dim0", lambda x: F.softmax(x, dim=0), lambda: (f(4, 7),)),
    case("softmax_dtype", lambda x: torch.softmax(x, -1, dtype=torch.float64), lambda: (f(4, 7),)),
    case("log_softmax", lambda x: torch.log_softmax(x, -1), lambda: (f(3, 4, 7),)),
    case(
        "softmax_neg_inf",
        lambda x: torch.softmax(x, -1),
        lambda: (torch.tensor([[0.0, -float("inf"), 1.0]]),),
    ),
    case("sort", torch.sort, lambda: (f(5, 7),), exact=True),
    case(
        "sort_descending_dim0",
        lambda x: torch.sort(x, 0, descending=True),
        lambda: (f(5, 7),),
        exact=True,
    ),
    case(
        "sort_stable_ties",
        lambda x: torch.sort(x, stable=True),
        lambda: (i64(30, low=0, high=4),),
        exact=True,
    ),
    case("argsort", lambda x: torch.argsort(x, dim=1, stable=True), lambda: (f(5, 7),), exact=True),
    case(
        "argsort_descending",
        lambda x: torch.argsort(x, descending=True, stable=True),
        lambda: (i64(20, low=0, high=5),),
        exact=True,
    ),
    case("topk", lambda x: torch.topk(x, 3), lambda: (f(5, 7),), exact=True),
    case(
        "topk_smallest_dim0",
        lambda x: torch.topk(x, 2, dim=0, largest=False),
        lambda: (f(5, 7),),
        exact=True,
    ),
    case("kthvalue", lambda x: torch.kthvalue(x, 3, 1), lambda: (f(5, 7),), exact=True),
    case(
        "kthvalue_keepdim",
        lambda x: torch.kthvalue(x, 2, 0, keepdim=True),
        lambda: (f(5, 7),),
        exact=True,
    ),
    case("unique", torch.unique, lambda: (i64(30, low=0, high=6),), exact=True),
    case(
        "unique_inverse_counts",
        lambda x: torch.unique(x, return_inverse=True, return_counts=True),
        lambda: (i64(30, low=0, high=6),),
        exact=True,
    ),
    case(
        "unique_dim",
        lambda x: torch.unique(x, dim=0),
        lambda: (i64(8, 2, low=0, high=2),),
        exact=True,
    ),
    case("unique_float", torch.unique, lambda: (torch.tensor([2.5, 1.0, 2.5, -3.0]),), exact=True),
    case(
        "unique_consecutive",
        lambda x: torch.unique_consecutive(x, return_counts=True),
        lambda: (torch.tensor([1, 1, 2, 2, 3, 1, 1]),),
        exact=True,
    ),
    case("flip", lambda x: torch.flip(x, (0, 1)), lambda: (f(4, 5),), exact=True),
    case("roll", lambda x: torch.roll(x, (1, -2), (0, 1)), lambda: (f(4, 5),), exact=True),
    case("repeat", lambda x: x.repeat(2, 1, 3), lambda: (f(4, 5),), exact=True),
    case(
        "repeat_interleave",
        lambda x: torch.repeat_interleave(x, 2, dim=0),
        lambda: (f(3, 2),),
        exact=True,
    ),
    case(
        "repeat_interleave_tensor",
        lambda x, r: torch.repeat_interleave(x, r, dim=0),
        lambda: (f(3, 2), torch.tensor([1, 0, 3])),
        exact=True,
    ),
    case("tile", lambda x: torch.tile(x, (2, 2)), lambda: (f(2, 3),), exact=True),
    case(
        "meshgrid",
        lambda a, b: torch.meshgrid(a, b, indexing="ij"),
        lambda: (f(3), f(4)),
        exact=True,
    ),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), SOFTMAX_SORT)
def test_softmax_and_sorting(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


SHAPE = [
    case("cat", lambda a, b: torch.cat([a, b]), lambda: (f(2, 3), f(4, 3)), exact=True),
    case(
        "cat_dim1",
        lambda a, b, c: torch.cat([a, b, c], 1),
        lambda: (f(2, 3), f(2, 1), f(2, 4)),
        exact=True,
    ),
    case("cat_with_empty", lambda a, b: torch.cat([a, b]), lambda: (f(2, 3), f(0, 3)), exact=True),
    case(
        "cat_mixed_dtypes", lambda a, b: torch.cat([a, b]), lambda: (i64(2, 3), f(1, 3)), exact=True
    ),
    case("stack", lambda a, b: torch.stack([a, b]), lambda: (f(2, 3), f(2, 3)), exact=True),
    case(
        "stack_dim_last",
        lambda a, b: torch.stack([a, b], -1),
        lambda: (f(2, 3), f(2, 3)),
        exact=True,
    ),
    case(
        "hstack_vstack",
        lambda a, b: (torch.hstack([a, b]), torch.vstack([a, b])),
        lambda: (f(2, 3), f(2, 3)),
        exact=True,
    ),
    case("split", lambda x: torch.split(x, 2), lambda: (f(5, 3),), exact=True),
    case("split_sizes", lambda x: torch.split(x, [1, 3, 2], dim=1), lambda: (f(2, 6),), exact=True),
    case("chunk", lambda x: torch.chunk(x, 3, 1), lambda: (f(2, 7),), exact=True),
    case("tensor_split", lambda x: torch.tensor_split(x, [1, 4]), lambda: (f(6, 2),), exact=True),
    case("unbind", lambda x: torch.unbind(x, 1), lambda: (f(2, 3),), exact=True),
    case("reshape_noncontiguous", lambda x: x.t().reshape(-1), lambda: (f(3, 4),), exact=True),
    case("view_flatten", lambda x: x.view(2, -1).flatten(), lambda: (f(4, 3),), exact=True),
    case(
        "permute_contiguous",
        lambda x: x.permute(2, 0, 1).contiguous(),
        lambda: (f(2, 3, 4),),
        exact=True,
    ),
    case(
        "squeeze_unsqueeze", lambda x: x.unsqueeze(0).squeeze(2), lambda: (f(3, 1, 4),), exact=True
    ),
    case("movedim", lambda x: torch.movedim(x, 0, -1), lambda: (f(2, 3, 4),), exact=True),
    case("expand_clone", lambda x: x.expand(4, 3).clone(), lambda: (f(1, 3),), exact=True),
    case("unfold_view", lambda x: x.unfold(0, 3, 2), lambda: (f(9),), exact=True),
    case(
        "view_as_real",
        lambda x: torch.view_as_real(x.to(torch.complex64)),
        lambda: (f(3),),
        exact=True,
    ),
    case(
        "clone_channels_last",
        lambda x: x.contiguous(memory_format=torch.channels_last),
        lambda: (f(2, 3, 4, 5),),
        exact=True,
    ),
    case("diag_embed", torch.diag_embed, lambda: (f(2, 3),), exact=True),
    case("block_diag", torch.block_diag, lambda: (f(2, 2), f(1, 3)), exact=True),
    case("cumulative_trapezoid", torch.cumulative_trapezoid, lambda: (f(6),)),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), SHAPE)
def test_shape_ops(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


def test_split_outputs_are_views_of_the_input():
    expected = f(6, 2)
    x = expected.to(DEVICE)
    first, _ = torch.split(x, 3)
    first.fill_(5.0)
    expected[:3] = 5.0
    assert_matches(x, expected, exact=True)


# ------------------------------------------------------------------ random, seeded

RANDOM = [
    case(
        "dropout_train",
        lambda x: F.dropout(x, 0.5, training=True),
        lambda: (f(10, 10),),
        exact=True,
        seed=7,
    ),
    case(
        "dropout_eval",
        lambda x: F.dropout(x, 0.5, training=False),
        lambda: (f(10, 10),),
        exact=True,
    ),
    case("bernoulli", torch.bernoulli, lambda: (torch.rand(20),), exact=True, seed=3),
    case(
        "multinomial",
        lambda p: torch.multinomial(p, 5, replacement=True),
        lambda: (probabilities(3, 6),),
        exact=True,
        seed=3,
    ),
    case("randn_like", torch.randn_like, lambda: (f(4, 5),), exact=True, seed=11),
    case(
        "randperm",
        lambda x: torch.randperm(10, device=x.device),
        lambda: (f(1),),
        exact=True,
        seed=5,
    ),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), RANDOM)
def test_random_ops_with_the_same_seed(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# -------------------------------------------------------------- in-place variants

IN_PLACE = [
    case("add_", lambda x, y: x.add_(y), lambda: (f(4, 5), f(4, 5)), exact=True),
    case("add__alpha_scalar", lambda x: x.add_(2, alpha=3), lambda: (f(4, 5),), exact=True),
    case("add__broadcast", lambda x, y: x.add_(y), lambda: (f(4, 5), f(5)), exact=True),
    case(
        "add__promotes_int_into_float",
        lambda x, y: x.add_(y),
        lambda: (f(4, 5), i64(4, 5)),
        exact=True,
    ),
    case("sub_", lambda x, y: x.sub_(y), lambda: (f(4, 5), f(4, 5)), exact=True),
    case("mul_", lambda x, y: x.mul_(y), lambda: (f(4, 5), f(4, 5)), exact=True),
    case("mul__scalar", lambda x: x.mul_(0.5), lambda: (f(4, 5),), exact=True),
    case(
        "div__rounding",
        lambda x, y: x.div_(y, rounding_mode="floor"),
        lambda: (f(4, 5), pos(4, 5)),
        exact=True,
    ),
    case("clamp_", lambda x: x.clamp_(-1.0, 1.0), lambda: (f(4, 5),), exact=True),
    case("clamp__min", lambda x: x.clamp_(min=0.0), lambda: (f(4, 5),), exact=True),
    case("relu_", torch.relu_, lambda: (f(4, 5),), exact=True),
    case("F_relu_inplace", lambda x: F.relu(x, inplace=True), lambda: (f(4, 5),), exact=True),
    case("exp_", lambda x: x.exp_(), lambda: (f(4, 5),)),
    case("sqrt_", lambda x: x.sqrt_(), lambda: (pos(4, 5),)),
    case("neg_", lambda x: x.neg_(), lambda: (f(4, 5),), exact=True),
    case("fill_", lambda x: x.fill_(2.5), lambda: (f(4, 5),), exact=True),
    case("zero_", lambda x: x.zero_(), lambda: (f(4, 5),), exact=True),
    case("copy_", lambda x, y: x.copy_(y), lambda: (f(4, 5), f(4, 5)), exact=True),
    case("copy__broadcast_cast", lambda x, y: x.copy_(y), lambda: (f(4, 5), i64(5)), exact=True),
    case(
        "masked_fill_",
        lambda x, m: x.masked_fill_(m, 1.5),
        lambda: (f(4, 5), boolean(4, 5)),
        exact=True,
    ),
    case(
        "index_add_",
        lambda x, i, s: x.index_add_(0, i, s),
        lambda: (f(4, 5), torch.tensor([3, 0]), f(2, 5)),
        exact=True,
    ),
    case(
        "scatter_",
        lambda x, i, s: x.scatter_(1, i, s),
        lambda: (f(4, 5), torch.tensor([[0, 1], [2, 3], [4, 0], [1, 2]]), f(4, 2)),
        exact=True,
    ),
    case(
        "scatter_add_",
        lambda x, i, s: x.scatter_add_(0, i, s),
        lambda: (f(3, 4), i64(5, 4, low=0, high=3), f(5, 4)),
        exact=True,
    ),
    case("bitwise_and_", lambda x, y: x.bitwise_and_(y), lambda: (i64(20), i64(20)), exact=True),
    case(
        "logical_or_", lambda x, y: x.logical_or_(y), lambda: (boolean(20), boolean(20)), exact=True
    ),
    case("uniform_", lambda x: x.uniform_(-1, 1), lambda: (f(4, 5),), exact=True, seed=2),
    case("normal_", lambda x: x.normal_(), lambda: (f(4, 5),), exact=True, seed=2),
    case("addmm_", lambda c, a, b: c.addmm_(a, b), lambda: (f(4, 3), f(4, 5), f(5, 3))),
    case("transpose_", lambda x: x.t_(), lambda: (f(4, 5),), exact=True),
    case("unsqueeze_", lambda x: x.unsqueeze_(1), lambda: (f(4, 5),), exact=True),
    case("squeeze_", lambda x: x.squeeze_(), lambda: (f(4, 1, 5),), exact=True),
    case("as_strided_", lambda x: x.as_strided_((2, 2), (1, 2), 1), lambda: (f(6),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), IN_PLACE)
def test_in_place_returns_self_and_matches(fn, inputs, exact, options):
    def run(first, *rest):
        result = fn(first, *rest)
        assert result is first, "the in-place op returned a different tensor object"
        return result

    run_case(run, inputs, exact, options)


def test_in_place_on_a_strided_view_updates_the_base():
    def fn(x):
        x[::2, 1:].mul_(10)
        x.t()[1].add_(1)
        x.diagonal().zero_()
        return x

    check(fn, f(6, 5), exact=True)


def test_in_place_through_a_view_returned_by_an_op():
    def fn(x):
        view = x.unflatten(0, (2, 3)).select(1, 2)
        view.fill_(-1)
        return x, view

    check(fn, f(6, 2), exact=True)


def test_resize_in_place_keeps_the_data_and_identity():
    x = f(4)
    device = x.to(DEVICE)
    assert device.resize_(3, 2) is device
    assert device.shape == (3, 2)
    assert device.device == torch.device(DEVICE, 0)
    assert_matches(device.view(-1)[:4], x, exact=True)
    assert device.resize_(2) is device
    assert_matches(device, x[:2], exact=True)


# ----------------------------------------------------------------------- out= ops


def out_case(name, fn, inputs, out, exact=True, **options):
    """`fn(*inputs, out=o)` with `o = out()` (the out tensor, on the same device)."""
    return pytest.param(fn, inputs, out, exact, options, id=name)


OUT = [
    out_case("add", torch.add, lambda: (f(4, 5), f(4, 5)), lambda: torch.empty(4, 5)),
    out_case(
        "add_resizes_wrong_shape", torch.add, lambda: (f(4, 5), f(4, 5)), lambda: torch.empty(3)
    ),
    out_case("add_resizes_empty", torch.add, lambda: (f(4, 5), f(5)), lambda: torch.empty(0)),
    out_case("add_resizes_larger", torch.add, lambda: (f(2, 3), f(2, 3)), lambda: torch.zeros(50)),
    out_case(
        "add_into_float64",
        torch.add,
        lambda: (f(4, 5), f(4, 5)),
        lambda: torch.empty(4, 5, dtype=torch.float64),
    ),
    out_case(
        "mul_int", torch.mul, lambda: (i64(6), i64(6)), lambda: torch.empty(6, dtype=torch.int64)
    ),
    out_case(
        "div_floor",
        lambda a, b, out: torch.div(a, b, rounding_mode="floor", out=out),
        lambda: (f(6), pos(6)),
        lambda: torch.empty(6),
    ),
    out_case("exp", torch.exp, lambda: (f(4, 5),), lambda: torch.empty(4, 5), exact=False),
    out_case(
        "clamp",
        lambda x, out: torch.clamp(x, -1, 1, out=out),
        lambda: (f(4, 5),),
        lambda: torch.empty(20),
    ),
    out_case(
        "sum_dim",
        lambda x, out: torch.sum(x, 1, out=out),
        lambda: (f(4, 5),),
        lambda: torch.empty(4),
        exact=False,
    ),
    out_case(
        "sum_dim_resizes",
        lambda x, out: torch.sum(x, 1, keepdim=True, out=out),
        lambda: (f(4, 5),),
        lambda: torch.empty(0),
        exact=False,
    ),
    out_case(
        "matmul", torch.matmul, lambda: (f(4, 5), f(5, 3)), lambda: torch.empty(4, 3), exact=False
    ),
    out_case(
        "mm_resizes", torch.mm, lambda: (f(4, 5), f(5, 3)), lambda: torch.empty(2, 2), exact=False
    ),
    out_case(
        "cat",
        lambda a, b, out: torch.cat([a, b], out=out),
        lambda: (f(2, 3), f(1, 3)),
        lambda: torch.empty(0),
    ),
    out_case(
        "index_select",
        lambda x, i, out: torch.index_select(x, 0, i, out=out),
        lambda: (f(5, 3), torch.tensor([4, 1])),
        lambda: torch.empty(1),
    ),
    out_case(
        "gather",
        lambda x, i, out: torch.gather(x, 1, i, out=out),
        lambda: (f(3, 4), i64(3, 2, low=0, high=4)),
        lambda: torch.empty(3, 2),
    ),
    out_case(
        "eq_bool",
        torch.eq,
        lambda: (i64(8, low=0, high=2), i64(8, low=0, high=2)),
        lambda: torch.empty(8, dtype=torch.bool),
    ),
    out_case(
        "where",
        lambda c, a, b, out: torch.where(c, a, b, out=out),
        lambda: (boolean(6), f(6), f(6)),
        lambda: torch.empty(6),
    ),
    out_case(
        "arange", lambda out: torch.arange(2, 20, 3, out=out), lambda: (), lambda: torch.empty(0)
    ),
    out_case(
        "linspace",
        lambda out: torch.linspace(0, 1, 7, out=out),
        lambda: (),
        lambda: torch.empty(7),
        exact=False,
    ),
]


RESIZE_WARNING = "ignore:An output with one or more elements was resized"


@pytest.mark.filterwarnings(RESIZE_WARNING)
@pytest.mark.parametrize(("fn", "inputs", "out", "exact", "options"), OUT)
def test_out_variants_return_the_out_tensor(fn, inputs, out, exact, options):
    def run(out, *args):
        result = fn(*args, out=out)
        assert result is out, "the out= op returned a different tensor object"
        return out

    check(run, out(), *inputs(), exact=exact, **options)


def test_out_with_non_contiguous_out_tensor():
    def fn(a, b, buffer):
        out = buffer[:, ::2]
        result = torch.add(a, b, out=out)
        assert result is out
        return buffer

    check(fn, f(3, 4), f(3, 4), torch.zeros(3, 8), exact=True)


def test_out_on_second_device_with_inputs_on_second_device():
    a, b = f(4, 5), f(4, 5)
    second = torch.device(DEVICE, 1)
    out = torch.empty(2, device=second)
    result = torch.add(a.to(second), b.to(second), out=out)
    assert result is out
    assert_matches(out, a + b, device=second, exact=True)
    assert out.shape == (4, 5)


def test_out_on_second_device_while_first_is_current():
    x = f(4, 5)
    second = torch.device(DEVICE, 1)
    with torch.openreg.device(0):
        out = torch.empty(0, device=second)
        assert torch.sum(x.to(second), 0, out=out) is out
    assert_matches(out, x.sum(0), device=second)


def test_out_with_storage_shared_by_a_view_resizes_like_cpu():
    def fn(a, b, out):
        alias = out.view(-1)
        torch.add(a, b, out=out)
        return out, alias

    check(fn, f(2, 2), f(2, 2), torch.zeros(2, 2), exact=True)


# ------------------------------------------------------------ non-contiguous inputs

NONCONTIGUOUS = [
    case("exp_transposed", lambda x: torch.exp(x.t()), lambda: (f(4, 5),)),
    case(
        "add_transposed_and_contiguous",
        lambda x, y: x.t() + y,
        lambda: (f(4, 5), f(5, 4)),
        exact=True,
    ),
    case("mul_sliced_step", lambda x, y: x[::2] * y[1::3], lambda: (f(8, 3), f(12, 3)), exact=True),
    case(
        "where_mixed_layouts",
        lambda c, x, y: torch.where(c.t(), x[:, ::2], y),
        lambda: (boolean(3, 4), f(4, 6), f(4, 3)),
        exact=True,
    ),
    case("sum_transposed", lambda x: x.t().sum(1), lambda: (f(4, 5),)),
    case("sum_sliced", lambda x: x[:, 1::2].sum(), lambda: (f(4, 9),)),
    case(
        "max_dim_permuted", lambda x: x.permute(2, 0, 1).max(0), lambda: (f(3, 4, 5),), exact=True
    ),
    case("cumsum_transposed", lambda x: torch.cumsum(x.t(), 1), lambda: (f(4, 5),)),
    case("mm_sliced", lambda a, b: a[::2] @ b[:, ::2], lambda: (f(8, 5), f(5, 6))),
    case(
        "bmm_transposed",
        lambda a, b: torch.bmm(a.transpose(1, 2), b),
        lambda: (f(2, 5, 4), f(2, 5, 3)),
    ),
    case("softmax_transposed", lambda x: torch.softmax(x.t(), 1), lambda: (f(4, 5),)),
    case("sort_transposed", lambda x: torch.sort(x.t(), 1), lambda: (f(4, 5),), exact=True),
    case(
        "index_select_on_view",
        lambda x, i: x.t().index_select(0, i),
        lambda: (f(4, 5), torch.tensor([4, 0])),
        exact=True,
    ),
    case(
        "gather_transposed",
        lambda x, i: torch.gather(x.t(), 1, i),
        lambda: (f(4, 5), i64(5, 2, low=0, high=4)),
        exact=True,
    ),
    case(
        "masked_select_sliced",
        lambda x, m: x[::2].masked_select(m),
        lambda: (f(6, 3), boolean(3, 3)),
        exact=True,
    ),
    case(
        "nonzero_transposed", lambda x: torch.nonzero(x.t()), lambda: (boolean(4, 5),), exact=True
    ),
    case("cat_views", lambda x: torch.cat([x.t(), x[::2].t()], 1), lambda: (f(4, 3),), exact=True),
    case("expanded_stride0", lambda x: (x.expand(3, 4) * 2).sum(0), lambda: (f(1, 4),)),
    case(
        "conv2d_channels_last",
        lambda x, w: F.conv2d(x.contiguous(memory_format=torch.channels_last), w),
        lambda: (f(1, 3, 6, 6), f(2, 3, 3, 3)),
    ),
    case("layer_norm_sliced", lambda x: F.layer_norm(x[:, ::2], (3,)), lambda: (f(4, 6),)),
    case("storage_offset_view", lambda x: x[1:, 2:].exp(), lambda: (f(4, 5),)),
    case(
        "clone_preserves_strides", lambda x: x.t().clone().stride(), lambda: (f(4, 5),), exact=True
    ),
    case("contiguous_of_sliced", lambda x: x[:, ::2].contiguous(), lambda: (f(4, 6),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), NONCONTIGUOUS)
def test_non_contiguous_inputs(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------------------- empty and 0-dim

EMPTY_SCALAR = [
    case("add_empty", torch.add, lambda: (f(0, 3), f(0, 3)), exact=True),
    case("exp_empty", torch.exp, lambda: (f(0),), exact=True),
    case("sum_empty", torch.sum, lambda: (f(0, 3),), exact=True),
    case("sum_empty_dim", lambda x: x.sum(0), lambda: (f(0, 3),), exact=True),
    case("prod_empty", torch.prod, lambda: (f(0),), exact=True),
    case("mean_empty_is_nan", torch.mean, lambda: (f(0),), exact=True),
    case("amax_empty_dim", lambda x: x.amax(1), lambda: (f(0, 3),), exact=True),
    case("cat_all_empty", lambda a, b: torch.cat([a, b]), lambda: (f(0, 2), f(0, 2)), exact=True),
    case("mm_zero_inner", torch.mm, lambda: (f(3, 0), f(0, 4)), exact=True),
    case("mm_zero_outer", torch.mm, lambda: (f(0, 3), f(3, 4)), exact=True),
    case(
        "index_select_empty_index",
        lambda x, i: x.index_select(0, i),
        lambda: (f(4, 3), torch.empty(0, dtype=torch.long)),
        exact=True,
    ),
    case(
        "getitem_empty_mask",
        lambda x, m: x[m],
        lambda: (f(4), torch.zeros(4, dtype=torch.bool)),
        exact=True,
    ),
    case("nonzero_empty", torch.nonzero, lambda: (f(0, 3),), exact=True),
    case("sort_empty", torch.sort, lambda: (f(0),), exact=True),
    case("unique_empty", torch.unique, lambda: (i64(0),), exact=True),
    case("softmax_empty", lambda x: torch.softmax(x, 0), lambda: (f(0, 4),), exact=True),
    case("reshape_empty", lambda x: x.reshape(3, 0, 2), lambda: (f(0),), exact=True),
    case("add_0dim", torch.add, lambda: (f(), f()), exact=True),
    case("exp_0dim", torch.exp, lambda: (f(),)),
    case("sum_0dim", torch.sum, lambda: (f(),), exact=True),
    case("max_0dim_dim", lambda x: torch.max(x, 0), lambda: (f(),), exact=True),
    case("argmax_0dim", torch.argmax, lambda: (f(),), exact=True),
    case("0dim_times_matrix", torch.mul, lambda: (f(), f(3, 3)), exact=True),
    case("0dim_where", torch.where, lambda: (torch.tensor(True), f(), f(3)), exact=True),
    case(
        "0dim_unsqueeze_cat",
        lambda a, b: torch.cat([a.unsqueeze(0), b.unsqueeze(0)]),
        lambda: (f(), f()),
        exact=True,
    ),
    case("0dim_item", lambda x: x.item(), lambda: (f(),), exact=True),
    case("0dim_int_item", lambda x: x.item(), lambda: (i64(),), exact=True),
    case("0dim_bool_if", lambda x: bool(x > 0), lambda: (f(),), exact=True),
    case("tolist", lambda x: x.tolist(), lambda: (i64(2, 3),), exact=True),
    case("index_0dim_tensor", lambda x, i: x[i], lambda: (f(5), torch.tensor(3)), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), EMPTY_SCALAR)
def test_empty_and_zero_dim(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


def test_cpu_0dim_tensor_mixes_with_openreg_tensor():
    x, scalar = f(3, 4), torch.tensor(2.5)
    assert_matches(x.to(DEVICE) * scalar, x * scalar, exact=True)
    assert_matches(scalar + x.to(DEVICE), scalar + x, exact=True)


# ------------------------------------------------------------------------- complex


def c64(*shape):
    return make(*shape, dtype=torch.complex64)


COMPLEX = [
    case("add", torch.add, lambda: (c64(4, 5), c64(4, 5)), exact=True),
    case("mul", torch.mul, lambda: (c64(4, 5), c64(4, 5)), exact=True),
    case("div", torch.div, lambda: (c64(4, 5), c64(4, 5))),
    case("abs", torch.abs, lambda: (c64(4, 5),)),
    case("angle", torch.angle, lambda: (c64(4, 5),)),
    case("exp", torch.exp, lambda: (c64(4, 5),)),
    case("real_imag", lambda x: (x.real.clone(), x.imag.clone()), lambda: (c64(4, 5),), exact=True),
    case("matmul", torch.matmul, lambda: (c64(3, 4), c64(4, 2))),
    case("sum", torch.sum, lambda: (c64(4, 5),)),
    case("polar", torch.polar, lambda: (pos(4), f(4))),
    case("complex_from_parts", torch.complex, lambda: (f(4), f(4)), exact=True),
    case(
        "view_as_complex",
        lambda x: torch.view_as_complex(x).clone(),
        lambda: (f(4, 2),),
        exact=True,
    ),
    case("fft", torch.fft.fft, lambda: (c64(8),)),
    case("rfft", torch.fft.rfft, lambda: (f(8),)),
    case("conj_physical", torch.conj_physical, lambda: (c64(4, 5),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), COMPLEX)
def test_complex(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


CONJUGATE_VIEWS = {
    "conj_to_cpu": "x.conj()",
    "conj_resolve": "x.conj().resolve_conj()",
    "conj_clone": "x.conj().clone()",
    "neg_view_to_cpu": "torch._neg_view(x)",
    "conj_imag": "x.conj().imag",
    "vdot": "torch.vdot(x[0], x[1])",
    "ifft_of_real": "torch.fft.ifft(x.real.contiguous())",
    "hfft": "torch.fft.hfft(x)",
    "adjoint_matmul": "x.mH @ x",
}


@pytest.fixture(scope="module")
def conjugate_view_results():
    """Runs every CONJUGATE_VIEWS case in ONE fresh interpreter (copying conjugate views
    out of openreg used to overflow the stack and kill the process); returns
    {name: "ok" | error}, where a case without a result is the one that crashed."""
    result = run_isolated(
        f"""
        import json
        cases = {dict(CONJUGATE_VIEWS)!r}
        torch.manual_seed(0)
        cpu = torch.randn(4, 4, dtype=torch.complex64)
        for name, expression in cases.items():
            print("BEGIN", name, flush=True)
            try:
                op = eval("lambda x: " + expression)
                expected = op(cpu)
                actual = op(cpu.to("openreg"))
                assert actual.device.type == "openreg", actual.device
                torch.testing.assert_close(actual.cpu(), expected)
                outcome = "ok"
            except Exception as error:
                outcome = f"{{type(error).__name__}}: {{error}}"
            print("RESULT", json.dumps([name, outcome]), flush=True)
        """
    )
    outcomes = {}
    for line in result.stdout.splitlines():
        if line.startswith("RESULT "):
            name, outcome = json.loads(line[len("RESULT ") :])
            outcomes[name] = outcome
    code = result.returncode
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    for name in CONJUGATE_VIEWS:
        outcomes.setdefault(
            name, f"no result: the interpreter ended ({how}) {result.stderr[-1500:]}"
        )
    return outcomes


@pytest.mark.parametrize("name", list(CONJUGATE_VIEWS))
def test_complex_conjugate_and_negative_views(name, conjugate_view_results):
    assert conjugate_view_results[name] == "ok", CONJUGATE_VIEWS[name]


# ------------------------------------------------------------------ second device

SECOND_DEVICE = [
    case("add", torch.add, lambda: (f(4, 5), f(4, 5)), exact=True),
    case("exp", torch.exp, lambda: (f(4, 5),)),
    case("matmul", torch.matmul, lambda: (f(4, 5), f(5, 3))),
    case("sum_dim", lambda x: x.sum(0), lambda: (f(4, 5),)),
    case("max_dim", lambda x: x.max(1), lambda: (f(4, 5),), exact=True),
    case("getitem_mask", lambda x, m: x[m], lambda: (f(4, 5), boolean(4, 5)), exact=True),
    case(
        "index_put_",
        lambda x, i, v: x.index_put_((i,), v),
        lambda: (f(4, 5), torch.tensor([2]), f(5)),
        exact=True,
    ),
    case("nonzero", torch.nonzero, lambda: (boolean(4, 5),), exact=True),
    case("sort", torch.sort, lambda: (f(4, 5),), exact=True),
    case(
        "unique",
        lambda x: torch.unique(x, return_counts=True),
        lambda: (i64(20, low=0, high=4),),
        exact=True,
    ),
    case("cat", lambda a, b: torch.cat([a, b]), lambda: (f(2, 5), f(3, 5)), exact=True),
    case("cross_entropy", F.cross_entropy, lambda: (f(6, 5), i64(6, low=0, high=5))),
    case("softmax", lambda x: x.softmax(-1), lambda: (f(4, 5),)),
    case("zeros_like", torch.zeros_like, lambda: (f(4, 5),), exact=True),
    case("full_like", lambda x: torch.full_like(x, 3.0), lambda: (f(4, 5),), exact=True),
    case(
        "arange_on_device", lambda x: torch.arange(6, device=x.device), lambda: (f(1),), exact=True
    ),
    case(
        "tensor_factory",
        lambda x: torch.tensor([1.0, 2.0], device=x.device) + x,
        lambda: (f(2),),
        exact=True,
    ),
    case(
        "randn_seeded",
        lambda x: torch.randn(3, device=x.device),
        lambda: (f(1),),
        exact=True,
        seed=4,
    ),
    case("mul_", lambda x, y: x.mul_(y), lambda: (f(4, 5), f(4, 5)), exact=True),
    case("transposed_view_op", lambda x: x.t().contiguous() * 2, lambda: (f(4, 5),), exact=True),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), SECOND_DEVICE)
def test_second_device_results_stay_there(fn, inputs, exact, options):
    check(fn, *inputs(), device=torch.device(DEVICE, 1), exact=exact, **options)


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), SECOND_DEVICE[:6])
def test_second_device_while_it_is_current(fn, inputs, exact, options):
    """With openreg:1 current, "openreg" means openreg:1 (check asserts the results are there)."""
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        check(fn, *inputs(), device=DEVICE, exact=exact, **options)


def test_copy_between_devices_round_trips():
    x = f(4, 5)
    first = x.to(DEVICE)
    second = first.to(torch.device(DEVICE, 1))
    assert second.device == torch.device(DEVICE, 1)
    back = second[:, ::2].to(torch.device(DEVICE, 0))
    assert_matches(back, x[:, ::2], device=torch.device(DEVICE, 0), exact=True)


def test_mixing_devices_raises_like_cuda():
    a = f(3).to(torch.device(DEVICE, 0))
    b = f(3).to(torch.device(DEVICE, 1))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(a, b)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(a, f(3))


# ------------------------------------------------------ nn building blocks, modules


def module_case(name, build, inputs, **options):
    """Builds a module with seeded parameters on the input's device and applies it."""

    def fn(x):
        torch.manual_seed(0)
        return build().to(x.device)(x)

    return case(name, fn, inputs, **options)


NN = [
    case(
        "sdpa",
        F.scaled_dot_product_attention,
        lambda: (f(2, 3, 5, 4), f(2, 3, 6, 4), f(2, 3, 6, 4)),
        rtol=1e-4,
        atol=1e-4,
    ),
    case(
        "sdpa_causal",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: (f(2, 3, 5, 4), f(2, 3, 5, 4), f(2, 3, 5, 4)),
        rtol=1e-4,
        atol=1e-4,
    ),
    case(
        "sdpa_bool_mask",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda: (f(2, 3, 5, 4), f(2, 3, 6, 4), f(2, 3, 6, 4), boolean(5, 6)),
        rtol=1e-4,
        atol=1e-4,
    ),
    case("embedding", F.embedding, lambda: (i64(5, low=0, high=10), f(10, 3)), exact=True),
    case(
        "embedding_padding_idx",
        lambda i, w: F.embedding(i, w, padding_idx=0),
        lambda: (i64(2, 4, low=0, high=10), f(10, 3)),
        exact=True,
    ),
    case(
        "embedding_bag_mean",
        lambda i, w, o: F.embedding_bag(i, w, o, mode="mean"),
        lambda: (i64(8, low=0, high=10), f(10, 3), torch.tensor([0, 3, 5])),
    ),
    case("one_hot", lambda t: F.one_hot(t, 6), lambda: (i64(7, low=0, high=6),), exact=True),
    case(
        "grid_sample",
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        lambda: (f(1, 2, 4, 4), f(1, 3, 3, 2, low=-1, high=1)),
    ),
    case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), lambda: (f(1, 8, 2, 3),), exact=True),
    case(
        "ctc_loss",
        lambda lp, t: F.ctc_loss(lp, t, torch.tensor([6, 6]), torch.tensor([3, 2])),
        lambda: (torch.log_softmax(f(6, 2, 5), 2), i64(2, 3, low=1, high=5)),
    ),
    case(
        "stft",
        lambda x: torch.stft(
            x, 8, window=torch.hann_window(8, device=x.device), return_complex=True
        ),
        lambda: (f(32),),
    ),
    module_case(
        "multihead_attention",
        lambda: _Apply(torch.nn.MultiheadAttention(8, 2, batch_first=True), 3),
        lambda: (f(2, 5, 8),),
    ),
    module_case(
        "transformer_encoder_layer_eval",
        lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(),
        lambda: (f(2, 5, 8),),
        rtol=1e-4,
        atol=1e-5,
    ),
    module_case(
        "transformer_encoder_layer_train",
        lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        lambda: (f(2, 5, 8),),
        rtol=1e-4,
        atol=1e-5,
    ),
    module_case("rnn_tanh", lambda: torch.nn.RNN(4, 3), lambda: (f(5, 2, 4),)),
    module_case("lstm", lambda: torch.nn.LSTM(4, 3, batch_first=True), lambda: (f(2, 5, 4),)),
    module_case("gru_two_layers", lambda: torch.nn.GRU(4, 3, num_layers=2), lambda: (f(5, 2, 4),)),
    module_case("lstm_cell", lambda: torch.nn.LSTMCell(4, 3), lambda: (f(2, 4),)),
    module_case(
        "mlp",
        lambda: torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2)
        ),
        lambda: (f(5, 6),),
    ),
]


class _Apply(torch.nn.Module):
    """Calls the wrapped module with its input repeated `count` times (query, key, value)."""

    def __init__(self, module, count):
        super().__init__()
        self.module, self.count = module, count

    def forward(self, x):
        return self.module(*([x] * self.count))


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), NN)
def test_nn_building_blocks(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------- foreach, identity, multiple out=


def foreach_in_place(op):
    """Applies an in-place _foreach op to the argument tensors; returns them (and whether
    the op returned None, compared with CPU)."""

    def fn(*tensors):
        result = op(list(tensors))
        return result is None, tensors

    return fn


MISC = [
    case(
        "foreach_add_scalar_",
        foreach_in_place(lambda ts: torch._foreach_add_(ts, 1.5)),
        lambda: (f(3), f(2, 2)),
        exact=True,
    ),
    case(
        "foreach_mul_list_",
        foreach_in_place(lambda ts: torch._foreach_mul_(ts[:2], ts[2:])),
        lambda: (f(3), f(2, 2), f(3), f(2, 2)),
        exact=True,
    ),
    case(
        "foreach_lerp_",
        foreach_in_place(lambda ts: torch._foreach_lerp_(ts[:1], ts[1:], 0.3)),
        lambda: (f(3), f(3)),
    ),
    case(
        "foreach_mul",
        lambda a, b: torch._foreach_mul([a, b], [b, a]),
        lambda: (f(3), f(3)),
        exact=True,
    ),
    case("foreach_norm", lambda a, b: torch._foreach_norm([a, b]), lambda: (f(3), f(2, 2))),
    case(
        "foreach_sqrt_",
        foreach_in_place(torch._foreach_sqrt_),
        lambda: (pos(3), pos(4)),
        exact=True,
    ),
    case(
        "contiguous_of_contiguous_is_self",
        lambda x: x.contiguous() is x,
        lambda: (f(3),),
        exact=True,
    ),
    case("to_same_dtype_is_self", lambda x: x.to(torch.float32) is x, lambda: (f(3),), exact=True),
    case(
        "detach_shares_storage", lambda x: (x.detach().add_(1), x)[1], lambda: (f(3),), exact=True
    ),
    case(
        "view_ops_share_storage",
        lambda x: (x.view(2, 3).t()[0].fill_(0), x.unflatten(0, (3, 2))[1].mul_(2), x)[2],
        lambda: (f(6),),
        exact=True,
    ),
    case("add_out_is_input", lambda a, b: torch.add(a, b, out=a), lambda: (f(3), f(3)), exact=True),
    case(
        "sort_out_pair_resized",
        lambda x, v, i: torch.sort(x, out=(v, i)),
        lambda: (f(5), torch.empty(0), torch.empty(0, dtype=torch.long)),
        exact=True,
    ),
    case(
        "max_dim_out_pair",
        lambda x, v, i: torch.max(x, 0, out=(v, i)),
        lambda: (f(5, 2), torch.empty(2), torch.empty(2, dtype=torch.long)),
        exact=True,
    ),
    case(
        "topk_out_pair",
        lambda x, v, i: torch.topk(x, 2, out=(v, i)),
        lambda: (f(6), torch.empty(0), torch.empty(0, dtype=torch.long)),
        exact=True,
    ),
    case("cumsum_out_is_input", lambda x: torch.cumsum(x, 0, out=x), lambda: (f(5),)),
    case(
        "mode_out_pair",
        lambda x, v, i: torch.mode(x, 0, out=(v, i)),
        lambda: (
            i64(7, 3, low=0, high=3),
            torch.empty(0, dtype=torch.long),
            torch.empty(0, dtype=torch.long),
        ),
        exact=True,
    ),
    case(
        "tril_indices",
        lambda x: torch.tril_indices(4, 3, device=x.device),
        lambda: (f(1),),
        exact=True,
    ),
    case("eye", lambda x: torch.eye(3, 4, device=x.device), lambda: (f(1),), exact=True),
    case("full", lambda x: torch.full((2, 3), 7, device=x.device), lambda: (f(1),), exact=True),
    case("linspace", lambda x: torch.linspace(-1, 1, 9, device=x.device), lambda: (f(1),)),
    case(
        "randint_seeded",
        lambda x: torch.randint(0, 10, (6,), device=x.device),
        lambda: (f(1),),
        exact=True,
        seed=1,
    ),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), MISC)
def test_foreach_identity_and_out_tuples(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------- large inputs (intra-op parallel paths)

LARGE = [
    case("add", torch.add, lambda: (f(1 << 20), f(1 << 20)), exact=True),
    case("sum", torch.sum, lambda: (f(1 << 20),)),
    case("nonzero", torch.nonzero, lambda: (boolean(300, 400),), exact=True),
    case(
        "masked_select", torch.masked_select, lambda: (f(300, 400), boolean(300, 400)), exact=True
    ),
    case("sort", torch.sort, lambda: (f(200_000),), exact=True),
    case(
        "unique",
        lambda x: torch.unique(x, return_counts=True),
        lambda: (i64(200_000, low=0, high=1000),),
        exact=True,
    ),
    case(
        "index_select",
        lambda x, i: x.index_select(0, i),
        lambda: (f(1000, 100), i64(5000, low=0, high=1000)),
        exact=True,
    ),
    case("matmul", torch.matmul, lambda: (f(256, 256), f(256, 256)), rtol=1e-4, atol=1e-3),
    case("cumsum", lambda x: x.cumsum(0), lambda: (f(100_000),), rtol=1e-4, atol=1e-3),
    case("topk", lambda x: torch.topk(x, 10), lambda: (f(100_000),), exact=True),
    case("softmax", lambda x: x.softmax(-1), lambda: (f(64, 4096),)),
    case("im2col", lambda x: F.unfold(x, 3), lambda: (f(4, 16, 32, 32),), exact=True),
    case("bincount", torch.bincount, lambda: (i64(100_000, low=0, high=100),), exact=True),
    case(
        "scatter_add",
        lambda x, i, v: x.scatter_add(0, i, v),
        lambda: (f(1000), i64(100_000, low=0, high=1000), f(100_000)),
        rtol=1e-4,
        atol=1e-3,
    ),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), LARGE)
def test_large_inputs(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


# ------------------------------------------------------------------ error parity


def raised(fn, *args):
    try:
        fn(*args)
    except Exception as error:
        return type(error), str(error).split("\n")[0]
    return None


ERRORS = [
    case(
        "index_select_out_of_range",
        lambda x, i: x.index_select(0, i),
        lambda: (f(3), torch.tensor([5])),
    ),
    case("broadcast_mismatch", torch.add, lambda: (f(3), f(4))),
    case(
        "gather_out_of_bounds",
        lambda x, i: torch.gather(x, 0, i),
        lambda: (f(3), torch.tensor([7])),
    ),
    case("cross_entropy_bad_target", F.cross_entropy, lambda: (f(2, 3), torch.tensor([0, 5]))),
    case("out_overlaps_input", lambda x: torch.add(x[:-1], 1, out=x[1:]), lambda: (f(5),)),
    case("in_place_cannot_broadcast_self", lambda x, y: x.add_(y), lambda: (f(3), f(2, 3))),
    case(
        "integer_division_by_zero",
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda: (torch.tensor([1, 2]), torch.tensor([0, 1])),
    ),
    case("max_of_empty", torch.max, lambda: (f(0),)),
    case("item_of_many", lambda x: x.item(), lambda: (f(2),)),
    case(
        "masked_fill_int_mask",
        lambda x, m: x.masked_fill(m, 1.0),
        lambda: (f(3), torch.tensor([1, 0, 1])),
    ),
    case("getitem_out_of_bounds", lambda x, i: x[i], lambda: (f(3), torch.tensor([3]))),
    case("cholesky_not_positive_definite", torch.linalg.cholesky, lambda: (-torch.eye(3),)),
    case(
        "multinomial_negative",
        lambda p: torch.multinomial(p, 1),
        lambda: (torch.tensor([-1.0, 2.0]),),
    ),
    case("mm_shape_mismatch", torch.mm, lambda: (f(2, 3), f(2, 3))),
    case("view_of_transposed", lambda x: x.t().view(-1), lambda: (f(2, 3),)),
]


@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), ERRORS)
def test_errors_match_cpu(fn, inputs, exact, options):
    """Kernel errors reach the caller with CPU's exception type and message."""
    args = inputs()
    expected = raised(fn, *args)
    assert expected is not None, "the case must raise on CPU"
    assert raised(fn, *to_device(args)) == expected


# ---------------------------------------------------- dtypes, dtype views, copies

DTYPES_AND_COPIES = [
    case(
        "int8",
        lambda x: (x + x, x * 3, x.sum(), x[::2], torch.cat([x, x])),
        lambda: (make(6, dtype=torch.int8),),
        exact=True,
    ),
    case(
        "int16",
        lambda x: (x + x, x * 3, x.sum(), x.max()),
        lambda: (make(6, dtype=torch.int16),),
        exact=True,
    ),
    case(
        "uint16_cast",
        lambda x: (x.to(torch.int32), x[1::2].clone()),
        lambda: (make(6, dtype=torch.uint16, low=0, high=100),),
        exact=True,
    ),
    case(
        "uint32_cast",
        lambda x: x.to(torch.int64),
        lambda: (make(6, dtype=torch.uint32, low=0, high=100),),
        exact=True,
    ),
    case(
        "float64", lambda x: (x.exp(), x.sum(), x.outer(x)), lambda: (make(6, dtype=torch.float64),)
    ),
    case(
        "complex128",
        lambda x: (x * x, x.abs(), x.sum()),
        lambda: (make(6, dtype=torch.complex128),),
    ),
    case(
        "float8_round_trip",
        lambda x: x.to(torch.float8_e4m3fn).to(torch.float32),
        lambda: (f(6, low=-4, high=4),),
        exact=True,
    ),
    case(
        "float8_e5m2_result",
        lambda x: x.to(torch.float8_e5m2),
        lambda: (f(6, low=-4, high=4),),
        exact=True,
    ),
    case(
        "bool_ops",
        lambda x: (x & x, x.sum(), x.any(), x.float()),
        lambda: (boolean(6),),
        exact=True,
    ),
    case("view_as_int32", lambda x: x.view(torch.int32), lambda: (f(3, 4),), exact=True),
    case("view_as_bytes", lambda x: x.view(torch.uint8), lambda: (f(3, 4),), exact=True),
    case(
        "write_through_dtype_view",
        lambda x: (x.view(torch.int32).bitwise_xor_(1), x)[1],
        lambda: (f(3, 4),),
        exact=True,
    ),
    case(
        "write_through_real_view",
        lambda x: (x.real.mul_(2), x)[1],
        lambda: (make(3, dtype=torch.complex64),),
        exact=True,
    ),
    case("list_index", lambda x: x[[0, 2, 2]], lambda: (f(4, 3),), exact=True),
    case(
        "bool_list_index", lambda x: x[[True, False, True, False]], lambda: (f(4, 3),), exact=True
    ),
    case(
        "none_then_index",
        lambda x, i: x[None, i],
        lambda: (f(4, 3), torch.tensor([1, 3])),
        exact=True,
    ),
    case(
        "ellipsis_then_index",
        lambda x, i: x[..., i],
        lambda: (f(2, 4, 3), torch.tensor([0, 2])),
        exact=True,
    ),
    case(
        "sort_with_nan",
        torch.sort,
        lambda: (torch.tensor([3.0, float("nan"), 1.0, float("nan"), -2.0]),),
        exact=True,
    ),
    case(
        "casts_on_device",
        lambda x: (x.to(torch.float64), x.to(torch.int8), x.half().float()),
        lambda: (f(5),),
        exact=True,
    ),
    case("copy__broadcast", lambda x, y: x.copy_(y), lambda: (f(3, 4), f(4)), exact=True),
    case(
        "copy__both_non_contiguous",
        lambda x, y: (x.t().copy_(y[::2]), x)[1],
        lambda: (f(3, 4), f(8, 3)),
        exact=True,
    ),
    case(
        "expand_then_contiguous",
        lambda x: x.expand(3, 4).contiguous(),
        lambda: (f(1, 4),),
        exact=True,
    ),
    case(
        "out_view_grows_shared_storage",
        lambda a, b, base: (torch.add(a, b, out=base[2:]), base),
        lambda: (f(4), f(4), torch.zeros(4)),
        exact=True,
    ),
]


@pytest.mark.filterwarnings(RESIZE_WARNING)
@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), DTYPES_AND_COPIES)
def test_dtypes_views_and_copies(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)


def test_setitem_with_a_cpu_tensor_value():
    x, value = f(3, 4), f(4)
    device = x.to(DEVICE)
    device[0] = value
    x[0] = value
    assert_matches(device, x, exact=True)


def test_cpu_0dim_values_in_in_place_indexing_ops():
    x, mask, value = f(3), torch.tensor([True, False, True]), torch.tensor(2.0)
    device = x.to(DEVICE)
    assert device.masked_fill_(mask.to(DEVICE), value) is device
    assert device.index_put_((torch.tensor([1]),), value) is device
    x.masked_fill_(mask, value).index_put_((torch.tensor([1]),), value)
    assert_matches(device, x, exact=True)


@pytest.mark.parametrize("out_device", ["cpu", "openreg:1"])
def test_out_on_another_device_is_rejected_like_cuda(out_device):
    a = f(3).to(DEVICE)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(a, a, out=torch.empty(3, device=out_device))


# ------------------------------------------------ inference fast paths, optimizers


class _PaddingMask(torch.nn.Module):
    """Calls the wrapped encoder with its second input as src_key_padding_mask."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, x, mask):
        return self.encoder(x, src_key_padding_mask=mask)


def inference(build):
    def fn(*inputs):
        torch.manual_seed(0)
        module = build().to(inputs[0].device).eval()
        with torch.no_grad():
            return module(*inputs)

    return fn


def optimizer_steps(kind, **options):
    """Three steps of torch.optim.<kind>; returns the parameter and the state tensors."""

    def fn(weight, x):
        weight = weight.clone().requires_grad_(True)
        optimizer = getattr(torch.optim, kind)([weight], lr=0.1, **options)
        for _ in range(3):
            optimizer.zero_grad()
            ((x @ weight) ** 2).mean().backward()
            optimizer.step()
        state = optimizer.state[weight]
        return weight.detach(), {k: v for k, v in state.items() if k != "step"}

    return fn


FAST_PATHS_AND_OPTIMIZERS = [
    case(
        "transformer_layer_fast_path",
        inference(
            lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        ),
        lambda: (f(2, 5, 8),),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "transformer_encoder_nested_fast_path",
        inference(
            lambda: _PaddingMask(
                torch.nn.TransformerEncoder(
                    torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2
                )
            )
        ),
        lambda: (f(2, 5, 8), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "multihead_attention_fast_path",
        inference(lambda: _Apply(torch.nn.MultiheadAttention(8, 2, batch_first=True), 3)),
        lambda: (f(2, 5, 8),),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "sgd_momentum",
        optimizer_steps("SGD", momentum=0.9, foreach=False),
        lambda: (f(4, 3), f(5, 4)),
    ),
    case(
        "sgd_momentum_foreach",
        optimizer_steps("SGD", momentum=0.9, foreach=True),
        lambda: (f(4, 3), f(5, 4)),
    ),
    case("adam_foreach", optimizer_steps("Adam", foreach=True), lambda: (f(4, 3), f(5, 4))),
    case("adamw_fused", optimizer_steps("AdamW", fused=True), lambda: (f(4, 3), f(5, 4))),
    case("adagrad", optimizer_steps("Adagrad"), lambda: (f(4, 3), f(5, 4))),
    case("rmsprop_foreach", optimizer_steps("RMSprop", foreach=True), lambda: (f(4, 3), f(5, 4))),
]


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@pytest.mark.parametrize(("fn", "inputs", "exact", "options"), FAST_PATHS_AND_OPTIMIZERS)
def test_inference_fast_paths_and_optimizers(fn, inputs, exact, options):
    run_case(fn, inputs, exact, options)
