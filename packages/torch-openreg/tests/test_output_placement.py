"""Functional CPU kernels compute their results straight into the preallocated outputs.

An asynchronous operator's outputs are allocated before its kernel runs; a functional
CPU kernel then allocates its result itself. While the kernel runs, the output memory is
reserved for an allocation of the same size (``OutputReservations`` in
``csrc/kernel_allocator.h``): at first the first one, and, once a call has shown which
allocation became the result, that one (``PlacementHints``). So results need no copy.
These tests pin down both outcomes and the cases where the reservation does not hold the
result: a temporary took it (the result is copied, and the next call learns), or the
result sits in it with another layout (staged through a copy).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from _async import warm

import torch_openreg

N = 64


def placements() -> tuple[int, int]:
    """(computed in place, copied) since the process started."""
    torch.openreg.synchronize()
    in_place, copied = torch_openreg._C._output_placement_counts()
    return in_place, copied


def delta(before: tuple[int, int]) -> tuple[int, int]:
    after = placements()
    return after[0] - before[0], after[1] - before[1]


def test_functional_results_are_computed_in_place():
    x = torch.randn(16, 100)
    device_x = x.openreg()
    warm(lambda: F.layer_norm(device_x, (100,)))
    before = placements()
    result = F.layer_norm(device_x, (100,))
    # native_layer_norm has three outputs (result, mean, rstd): none is copied.
    assert delta(before) == (3, 0)
    torch.testing.assert_close(result.cpu(), F.layer_norm(x, (100,)), rtol=0, atol=0)


@pytest.fixture(scope="module")
def placement_ops() -> Iterator[dict[str, bool]]:
    """Two custom operators whose CPU kernels misuse the reservation on purpose."""
    state = {"transposed": False}
    library = torch.library.Library("openreg_placement_test", "DEF")
    library.define("temporary_first(Tensor x) -> Tensor")
    library.define("relayout(Tensor x) -> Tensor")

    def temporary_first(x: torch.Tensor) -> torch.Tensor:
        # A scratch tensor of the result's size is allocated first: it gets the
        # output's memory, and garbage is written there before the result exists.
        scratch = torch.empty_like(x).fill_(float("nan"))
        result = x + 1
        del scratch
        return result

    def relayout(x: torch.Tensor) -> torch.Tensor:
        if not state["transposed"]:
            return x * 2
        # Same bytes as the planned (contiguous) output, transposed strides.
        result = torch.empty(N, N).t()
        result.copy_(x * 2)
        return result

    library.impl("temporary_first", temporary_first, "CPU")
    library.impl("relayout", relayout, "CPU")
    library.impl("temporary_first", torch.empty_like, "Meta")
    library.impl("relayout", torch.empty_like, "Meta")
    yield state
    library._destroy()


def test_a_temporary_holding_the_reservation_does_not_corrupt_the_result(placement_ops):
    op = torch.ops.openreg_placement_test.temporary_first
    x = torch.randn(N, N)
    device_x = x.openreg()
    warm(lambda: op(device_x))
    before = placements()
    result = op(device_x)
    assert delta(before) == (0, 1)  # the real result was copied over the scratch data
    torch.testing.assert_close(result.cpu(), x + 1, rtol=0, atol=0)

    before = placements()
    again = op(device_x)
    assert delta(before) == (1, 0)  # learned: the second allocation of that size
    torch.testing.assert_close(again.cpu(), x + 1, rtol=0, atol=0)


def test_a_result_in_the_reservation_with_another_layout_is_staged(placement_ops):
    op = torch.ops.openreg_placement_test.relayout
    x = torch.randn(N, N)  # not symmetric: a copy within one buffer would scramble it
    device_x = x.openreg()
    warm(lambda: op(device_x))  # plans a contiguous output
    placement_ops["transposed"] = True
    try:
        before = placements()
        result = op(device_x)
        assert delta(before) == (0, 1)
    finally:
        placement_ops["transposed"] = False
    assert result.stride() == (N, 1)
    torch.testing.assert_close(result.cpu(), x * 2, rtol=0, atol=0)


def test_convolution_learns_to_compute_in_place():
    # oneDNN computes into a scratch buffer of the output's size first (which
    # takes the reservation), then reorders into the result.
    x, weight, bias = torch.randn(2, 3, 16, 16), torch.randn(4, 3, 3, 3), torch.randn(4)
    args = (x.openreg(), weight.openreg(), bias.openreg())
    warm(lambda: F.conv2d(*args, padding=1), lambda: F.conv2d(*args, padding=1))
    before = placements()
    results = [F.conv2d(*args, padding=1) for _ in range(3)]
    assert delta(before) == (3, 0)
    for result in results:
        torch.testing.assert_close(result.cpu(), F.conv2d(x, weight, bias, padding=1))
