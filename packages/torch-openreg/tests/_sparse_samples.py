"""PyTorch's sparse OpInfo samples on openreg against the CPU (run as a script).

For every OpInfo of ``op_db`` that supports a sparse layout (COO, CSR, CSC,
BSR, BSC), the float64 samples of ``op.sample_inputs_sparse(layout, "cpu",
...)`` run on the CPU and, with every tensor moved by ``.to("openreg")``, on
openreg. A sample passes when the openreg run returns what the CPU run returns:
the same structure, every tensor on openreg with the CPU result's layout,
shape and dtype, values within ``torch.testing.assert_close``'s defaults
(sparse results compared densified). Samples the CPU itself rejects are not
counted. Samples are drawn after ``torch.manual_seed(0)``, so every run
draws the same ones. Prints one JSON object: counts per layout and the failures.

Run by ``test_sparse.py`` in a fresh interpreter (a crash fails that test, not
the session); ``python _sparse_samples.py`` runs it by hand.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import torch

import torch_openreg  # noqa: F401

LAYOUTS = [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc]
DTYPE = torch.float64


def move(value: Any) -> Any:
    """Every tensor in `value` on openreg; containers keep their types."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("openreg").requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(move(item) for item in value)
    if isinstance(value, dict):
        return {key: move(item) for key, item in value.items()}
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device("openreg")
    if value == "cpu":
        return "openreg"
    return value


def compare(expected: Any, actual: Any) -> None:
    """Raises AssertionError where `actual` (openreg) differs from `expected` (CPU)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
        assert actual.device.type == "openreg", f"result on {actual.device}"
        assert actual.layout == expected.layout, f"layout {actual.layout} != {expected.layout}"
        assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        if expected.layout == torch.sparse_coo:
            assert actual.is_coalesced() == expected.is_coalesced(), "coalesced flag differs"
        dense = actual.cpu()
        if expected.layout != torch.strided:
            dense, expected = dense.to_dense(), expected.to_dense()
        torch.testing.assert_close(dense, expected, equal_nan=True)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), "structure"
        for left, right in zip(expected, actual, strict=True):
            compare(left, right)
    else:
        assert expected == actual, f"{expected!r} != {actual!r}"


def readable(value: Any) -> None:
    """Raises if a sparse tensor in `value` cannot be read densely: some CPU
    kernels (masked reductions with empty mask rows) return compressed tensors
    whose members disagree, and such samples are the CPU's failures."""
    if isinstance(value, torch.Tensor) and value.layout != torch.strided:
        value.to_dense()
    elif isinstance(value, (list, tuple)):
        for item in value:
            readable(item)


def run_sample(op: Any, sample: Any) -> str | None:
    """None if the sample passes, 'cpu' if the CPU rejects it, else the failure."""
    try:
        expected = op(sample.input, *sample.args, **sample.kwargs)
        readable(expected)
    except Exception:
        return "cpu"
    try:
        actual = op(move(sample.input), *move(sample.args), **move(sample.kwargs))
        torch.openreg.synchronize()
        compare(expected, actual)
    except Exception as error:  # reported, not hidden
        return f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return None


def main() -> None:
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    summary: dict[str, Any] = {"passed": {}, "failed": {}, "failures": []}
    for layout in LAYOUTS:
        name = str(layout).split(".")[-1]
        passed = failed = 0
        for op in op_db:
            if not op.supports_sparse_layout(layout) or DTYPE not in op.supported_dtypes("cpu"):
                continue
            torch.manual_seed(0)  # the same samples in every run
            try:
                samples = list(op.sample_inputs_sparse(layout, "cpu", DTYPE))
            except Exception:  # an OpInfo without samples for this layout
                continue
            for index, sample in enumerate(samples):
                outcome = run_sample(op, sample)
                if outcome is None:
                    passed += 1
                elif outcome != "cpu":
                    failed += 1
                    summary["failures"].append(f"{name} {op.name}[{index}]: {outcome}")
        summary["passed"][name] = passed
        summary["failed"][name] = failed
    json.dump(summary, sys.stdout)


if __name__ == "__main__":
    main()
