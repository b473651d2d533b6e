"""Aliasing between the arguments of queued kernels.

An asynchronous operator's CPU aliases are made on the stream worker from
descriptors the caller recorded at launch (DeferredAliases in
csrc/engine/kernel_context.h). Arguments that share a storage on the device must
share one storage in the aliases too, as the synchronous path gives them: CPU
kernels decide on it (overlap checks, in-place updates through views). A probe
operator with a Python CPU kernel reports what the kernel sees: whether two of
its arguments share a storage. Each call is queued behind a held stream
(tests/_async.py), so it is checked on the asynchronous path and not on the
synchronous first call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from _async import held_stream, warm

import torch_openreg  # noqa: F401  (registers the device)

# How many times a probe kernel has run (to see that a call was queued, not run).
_kernel_runs: list[str] = []


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> float:
    _kernel_runs.append("probe")
    # _cdata of a storage is the address of its c10::StorageImpl.
    return float(a.untyped_storage()._cdata == b.untyped_storage()._cdata)


@pytest.fixture(scope="module")
def probe() -> Iterator[object]:
    """openreg_alias_test.shares(a, b) (with an out= overload) and mark_(target, source):
    1.0 where the CPU kernel sees its two tensors share a storage, else 0.0;
    identical(a, b): 1.0 where it sees one tensor passed twice."""
    library = torch.library.Library("openreg_alias_test", "DEF")
    library.define("shares(Tensor a, Tensor b) -> Tensor")
    library.define("shares.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)")
    library.define("mark_(Tensor(a!) target, Tensor source) -> Tensor(a!)")
    library.define("identical(Tensor a, Tensor b) -> Tensor")

    def shares(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.full((), _same_storage(a, b))

    def shares_out(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        return out.fill_(_same_storage(a, b) + 2 * _same_storage(out, a))

    def mark_(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        return target.fill_(_same_storage(target, source))

    def identical(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # One TensorImpl is one Python object: `is` is at::Tensor::is_same().
        _kernel_runs.append("identical")
        return torch.full((), float(a is b))

    library.impl("shares", shares, "CPU")
    library.impl("shares.out", shares_out, "CPU")
    library.impl("mark_", mark_, "CPU")
    library.impl("identical", identical, "CPU")
    library.impl("shares", lambda a, b: a.new_empty(()), "Meta")
    library.impl("identical", lambda a, b: a.new_empty(()), "Meta")
    library.impl("shares.out", lambda a, b, *, out: out, "Meta")
    library.impl("mark_", lambda target, source: target, "Meta")
    yield torch.ops.openreg_alias_test
    library._destroy()


def queued(call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``call`` made behind a held stream (so its kernel is queued, not run at once)."""
    warm(call)  # the first call of a signature runs synchronously
    with held_stream():
        runs = len(_kernel_runs)
        result = call()
        assert len(_kernel_runs) == runs, "the probe ran synchronously"
    return result.cpu()


def test_views_of_one_storage_share_it_in_a_queued_kernel(probe):
    x = torch.arange(8.0, device="openreg")
    assert queued(lambda: probe.shares(x[:4], x[4:])).item() == 1.0
    assert queued(lambda: probe.shares(x, x[::2])).item() == 1.0


def test_tensors_of_different_storages_stay_apart_in_a_queued_kernel(probe):
    x = torch.arange(8.0, device="openreg")
    y = torch.arange(8.0, device="openreg")
    assert queued(lambda: probe.shares(x, y)).item() == 0.0


def test_an_in_place_kernel_on_a_view_of_its_input_sees_one_storage(probe):
    x = torch.zeros(8, device="openreg")
    queued(lambda: probe.mark_(x[::2], x))
    assert x[::2].cpu().tolist() == [1.0] * 4


def test_out_into_a_view_of_an_input_shares_its_storage(probe):
    x = torch.zeros(8, device="openreg")
    y = torch.zeros(8, device="openreg")
    # out= a view of `a`: 1 (a and b share) + 2 (out and a share).
    queued(lambda: probe.shares(x, x[1:], out=x[:1]))
    assert x[0].item() == 3.0
    queued(lambda: probe.shares(x, y, out=y[2:3]))
    assert y[2].item() == 0.0


def test_one_tensor_passed_twice_is_one_alias(probe):
    x = torch.arange(8.0, device="openreg")
    assert queued(lambda: probe.identical(x, x)).item() == 1.0
    assert queued(lambda: probe.identical(x, x[:])).item() == 0.0
