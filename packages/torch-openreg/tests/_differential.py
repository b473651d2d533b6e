"""Helpers for differential tests: run an op on CPU and on openreg, compare.

``check(fn, *args, **kwargs)`` runs ``fn`` on the CPU arguments and on copies
moved to an openreg device, then asserts that

* the outputs have the same structure (tuples, lists, namedtuples, Python
  scalars, ``torch.Size`` ...),
* every output tensor of the openreg run is on that openreg device, and
* its values, dtype and shape equal the CPU output's: bit for bit when
  ``exact`` (NaNs equal), else within ``torch.testing.assert_close``'s
  default tolerances for the dtype, or ``rtol``/``atol`` when given.

Inputs are deep-copied for the CPU run and moved with ``to_device`` for the
openreg run, so in-place ops see fresh inputs in both runs.
``run_isolated`` runs code in a fresh interpreter, for cases that may crash
the process (a backend bug must fail its test, not kill the session).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import torch

DEVICE = "openreg"


def _map(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """Applies `fn` to every tensor in nested lists/tuples/dicts, keeping container types."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, list):
        return [_map(fn, item) for item in value]
    if isinstance(value, tuple):
        items = [_map(fn, item) for item in value]
        if type(value) is tuple:
            return tuple(items)
        if hasattr(value, "_fields"):  # namedtuple
            return type(value)(*items)
        return type(value)(items)  # structseq (torch.return_types.*)
    if isinstance(value, dict):
        return {key: _map(fn, item) for key, item in value.items()}
    return value


def to_device(value: Any, device: str | torch.device = DEVICE) -> Any:
    """Copies every tensor in `value` to `device` (keeping requires_grad)."""

    def move(tensor: torch.Tensor) -> torch.Tensor:
        moved = tensor.detach().to(device)
        return moved.requires_grad_(tensor.requires_grad)

    return _map(move, value)


def to_cpu(value: Any) -> Any:
    return _map(lambda tensor: tensor.cpu(), value)


def _leaves(value: Any, path: str = "output") -> list[tuple[str, Any]]:
    if isinstance(value, torch.Size) or not isinstance(value, (list, tuple, dict)):
        return [(path, value)]
    items = value.items() if isinstance(value, dict) else enumerate(value)
    leaves = []
    for key, item in items:
        leaves += _leaves(item, f"{path}[{key!r}]")
    return leaves


def _structure(value: Any) -> Any:
    if isinstance(value, torch.Size) or not isinstance(value, (list, tuple, dict)):
        return type(value).__name__ if not isinstance(value, (int, float, bool)) else "scalar"
    if isinstance(value, dict):
        return ("dict", tuple((key, _structure(item)) for key, item in value.items()))
    return (type(value).__name__, tuple(_structure(item) for item in value))


def assert_matches(
    actual: Any,
    expected: Any,
    *,
    device: str | torch.device = DEVICE,
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Asserts that `actual` (an openreg run's output) matches the CPU output `expected`."""
    device = torch.device(device)
    if device.index is None:
        device = torch.device(device.type, torch.openreg.current_device())
    assert _structure(actual) == _structure(expected), (
        f"output structure differs: {_structure(actual)} vs {_structure(expected)}"
    )
    for (path, got), (_, want) in zip(_leaves(actual), _leaves(expected), strict=True):
        if isinstance(want, torch.Tensor):
            assert isinstance(got, torch.Tensor), f"{path}: expected a tensor, got {got!r}"
            assert got.device == device, f"{path} is on {got.device}, expected {device}"
            got = got.cpu()
            if exact:
                torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            else:
                torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        elif isinstance(want, float):
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert got == want, f"{path}: expected {want!r}, got {got!r}"


def check(
    fn: Callable[..., Any],
    *args: Any,
    device: str | torch.device = DEVICE,
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int | None = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """Runs fn on CPU and on `device`, asserts the results match; returns (actual, expected).

    With `seed`, both runs start from torch.manual_seed(seed) (random ops).
    """
    cpu_args, cpu_kwargs = copy.deepcopy((args, kwargs))
    device_args, device_kwargs = to_device((args, kwargs), device)
    if seed is not None:
        torch.manual_seed(seed)
    expected = fn(*cpu_args, **cpu_kwargs)
    if seed is not None:
        torch.manual_seed(seed)
    actual = fn(*device_args, **device_kwargs)
    assert_matches(actual, expected, device=device, exact=exact, rtol=rtol, atol=atol)
    return actual, expected


def make(
    *shape: int,
    dtype: torch.dtype = torch.float32,
    low: float | None = None,
    high: float | None = None,
    noncontiguous: bool = False,
) -> torch.Tensor:
    """A CPU tensor from torch.testing.make_tensor (deterministic after torch.manual_seed)."""
    return torch.testing.make_tensor(
        shape, dtype=dtype, device="cpu", low=low, high=high, noncontiguous=noncontiguous
    )


def run_isolated(code: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Runs `code` (dedented; torch and torch_openreg imported) in a fresh interpreter."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OPENREG_") and key not in ("PYTHONFAULTHANDLER", "PYTHONDEVMODE")
    }
    prelude = "import torch\nimport torch_openreg\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
