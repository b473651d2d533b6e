"""Worker process for test_opinfo.py: runs OpInfo samples on CPU and openreg.

Run by test_opinfo.py as ``python _opinfo_worker.py CONFIG_JSON`` (keys
``start``: first plan entry, ``samples_per_op``, ``samples_per_out`` (for the
out= variant), ``extra_dtypes``: see plan_entries). It prints one JSON object
per line on stdout (flushed), so that the parent can tell which sample was
running if this process crashes or hangs, and restart after that op:

* ``{"event": "plan", "entries": n}`` once;
* ``{"event": "begin", "entry": i, "sample": -1, ...}`` before the samples of
  entry i of the plan (an (op, dtype, variant) triple) are generated;
* ``{"event": "op", "entry": i, "name": ..., "dtype": ..., "samples": k}``
  once they are;
* ``{"event": "begin", "entry": i, "sample": j, ...}`` before a sample runs;
* ``{"event": "result", "entry": i, "sample": j, "name": ..., "dtype": ...,
  "status": ..., "error": ..., "s": seconds}`` after it, where status is one of

  - ``pass``:      openreg result equals the CPU result (values compared);
  - ``fail``:      openreg raised, returned something different, or returned
                   tensors that are not on the openreg device;
  - ``random``:    two seeded CPU runs disagree, or the op is in
                   ALWAYS_NONDETERMINISTIC: only the structure, shapes and
                   dtypes are compared (a mismatch is reported as ``fail``);
  - ``cpu_error``: the sample fails on CPU itself (not a backend question);

* ``{"event": "done"}`` at the end.

The out= variant (run_out_sample) passes zero-element out tensors, which the
op must resize and fill, and must return when it does so on CPU.

This is a separate process because a backend bug may kill the process (a
SIGSEGV from a stack overflow or a host access to device memory) and because
importing PyTorch's test suite changes global state (it freezes the
``torch.backends`` flags), which must not leak into the pytest process.
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
import time
import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_openreg  # noqa: F401  (registers the openreg device)

DEVICE = "openreg"
SEED = 1234

# Ops whose results depend on the memory they get or on global state rather
# than on their inputs, even with a fixed seed: compared by structure only.
ALWAYS_NONDETERMINISTIC = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "new_empty",
        "new_empty_strided",
    }
)

# Positional arguments that stay on the host, as on CUDA (the op requires a CPU tensor).
HOST_ARGUMENTS = {"tensor_split": (0,)}


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _first_line(error: BaseException) -> str:
    """The error's first line (plus assert_close's greatest differences), shortened."""
    text = f"{type(error).__name__}: {error}".strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    details = [line for line in lines[1:] if line.startswith("Greatest")]
    return " ".join(lines[:1] + details)[:300]


def _to_device(tree, memo: dict, host_positions: tuple[int, ...] = ()):
    """Moves every tensor in (input, args, kwargs) to openreg, keeping strides, offsets and
    aliasing; CPU devices (also as the string "cpu") become openreg; positional args at
    `host_positions` stay on the host."""

    def move_tensor(value: torch.Tensor) -> torch.Tensor:
        if value.layout != torch.strided or value.device.type != "cpu":
            return value.to(DEVICE)
        storage = value.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes(), value.dtype)
        base = memo.get(key)
        if base is None:
            elements = storage.nbytes() // value.element_size()
            flat = torch.empty(0, dtype=value.dtype).set_(storage, 0, (elements,), (1,))
            base = flat.to(DEVICE)
            memo[key] = base
        with torch.no_grad():
            moved = base.as_strided(value.size(), value.stride(), value.storage_offset())
        if value.is_conj():
            moved = moved.conj()
        if value.is_neg():
            moved = torch._neg_view(moved)
        if value.requires_grad:
            moved = moved.detach().requires_grad_(True)
        return moved

    def move(value):
        if isinstance(value, torch.Tensor):
            return move_tensor(value)
        if isinstance(value, torch.device) and value.type == "cpu":
            return torch.device(DEVICE)
        if value == "cpu" and isinstance(value, str):
            return DEVICE
        if isinstance(value, torch.Size):
            return value
        if isinstance(value, list):
            return [move(item) for item in value]
        if type(value) is tuple:
            return tuple(move(item) for item in value)
        if isinstance(value, dict):
            return {name: move(item) for name, item in value.items()}
        return value

    sample_input, args, kwargs = tree
    moved_args = tuple(
        arg if position in host_positions else move(arg) for position, arg in enumerate(args)
    )
    return move(sample_input), moved_args, move(kwargs)


def _check_on_device(tree) -> None:
    for leaf in tree_flatten(tree)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.device.type != DEVICE:
            raise AssertionError(f"openreg run returned a tensor on {leaf.device}")


def _compare(actual, expected, values: bool) -> None:
    """Compares the (CPU copy of the) openreg output with the CPU output."""
    actual_leaves, actual_spec = tree_flatten(actual)
    expected_leaves, expected_spec = tree_flatten(expected)
    if actual_spec != expected_spec:
        raise AssertionError(f"output structure differs: {actual_spec} vs {expected_spec}")
    for got, want in zip(actual_leaves, expected_leaves, strict=True):
        if isinstance(want, torch.Tensor):
            if not isinstance(got, torch.Tensor):
                raise AssertionError(f"expected a tensor, got {type(got).__name__}")
            if got.shape != want.shape or got.dtype != want.dtype:
                raise AssertionError(
                    f"expected {want.dtype}{list(want.shape)}, got {got.dtype}{list(got.shape)}"
                )
            if values:
                if want.layout != torch.strided:
                    got, want = got.to_dense(), want.to_dense()
                torch.testing.assert_close(got, want, equal_nan=True, check_device=False)
        elif isinstance(want, (int, float, complex)) and not isinstance(want, bool):
            if values:
                torch.testing.assert_close(got, want, equal_nan=True)
        elif values and got != want:
            raise AssertionError(f"expected {want!r}, got {got!r}")


def _to_cpu(tree):
    def move(value):
        return value.cpu() if isinstance(value, torch.Tensor) else value

    return tree_map(move, tree, is_leaf=lambda value: isinstance(value, torch.Size))


def _seeded(fn, *args, **kwargs):
    torch.manual_seed(SEED)
    return fn(*args, **kwargs)


def _same(first, second) -> bool:
    try:
        _compare(first, second, values=True)
    except Exception:
        return False
    return True


def run_sample(op, sample) -> tuple[str, str]:
    """Returns (status, error message) for one sample (see the module docstring)."""
    arguments = (sample.input, sample.args, sample.kwargs)
    try:
        cpu_args = copy.deepcopy(arguments)
        expected = _seeded(op, cpu_args[0], *cpu_args[1], **cpu_args[2])
        cpu_args = copy.deepcopy(arguments)
        again = _seeded(op, cpu_args[0], *cpu_args[1], **cpu_args[2])
    except Exception as error:
        return "cpu_error", _first_line(error)
    deterministic = op.name not in ALWAYS_NONDETERMINISTIC and _same(again, expected)
    try:
        host = HOST_ARGUMENTS.get(op.name, ())
        device_args = _to_device(copy.deepcopy(arguments), {}, host)
        actual = _seeded(op, device_args[0], *device_args[1], **device_args[2])
        _check_on_device(actual)
        _compare(_to_cpu(actual), expected, values=deterministic)
    except Exception as error:
        return "fail", _first_line(error)
    return ("pass" if deterministic else "random"), ""


def _empty_outs(expected, device):
    """Zero-element tensors shaped like `expected` (a tensor, or a tuple or list of tensors)
    on `device`, or None when the output is not of that form."""
    tensors = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    if any(t.layout != torch.strided for t in tensors):
        return None
    outs = [torch.empty(0, dtype=t.dtype, device=device) for t in tensors]
    if isinstance(expected, (tuple, list)):
        return type(expected)(outs) if type(expected) in (tuple, list) else tuple(outs)
    return outs[0]


def _returns_out(result, out) -> bool:
    """True if the out= call returned its out tensor(s) themselves."""
    if isinstance(out, (tuple, list)):
        return isinstance(result, (tuple, list)) and all(
            a is b for a, b in zip(result, out, strict=True)
        )
    return result is out


def run_out_sample(op, sample) -> tuple[str, str]:
    """out= variant: zero-element out tensors on openreg must be resized and filled with the
    CPU result; the call must return them (the same objects) when it does so on CPU."""
    arguments = (sample.input, sample.args, sample.kwargs)
    try:
        cpu_args = copy.deepcopy(arguments)
        expected = _seeded(op, cpu_args[0], *cpu_args[1], **cpu_args[2])
        cpu_out, again = _empty_outs(expected, "cpu"), _empty_outs(expected, "cpu")
        if cpu_out is None:
            return "cpu_error", "output is not a tensor or a sequence of tensors"
        cpu_args = copy.deepcopy(arguments)
        cpu_result = _seeded(op, cpu_args[0], *cpu_args[1], **cpu_args[2], out=cpu_out)
        cpu_args = copy.deepcopy(arguments)
        _seeded(op, cpu_args[0], *cpu_args[1], **cpu_args[2], out=again)
    except Exception as error:
        return "cpu_error", _first_line(error)
    deterministic = op.name not in ALWAYS_NONDETERMINISTIC and _same(again, cpu_out)
    try:
        host = HOST_ARGUMENTS.get(op.name, ())
        device_args = _to_device(copy.deepcopy(arguments), {}, host)
        device_out = _empty_outs(expected, DEVICE)
        result = _seeded(op, device_args[0], *device_args[1], **device_args[2], out=device_out)
        if _returns_out(cpu_result, cpu_out) and not _returns_out(result, device_out):
            raise AssertionError("the out= call did not return its out tensor(s)")
        _check_on_device(device_out)
        _compare(_to_cpu(device_out), cpu_out, values=deterministic)
    except Exception as error:
        return "fail", _first_line(error)
    return ("pass" if deterministic else "random"), ""


def plan_entries(op_db, extra_dtypes: dict[str, list[str]]) -> list[tuple[int, str, str]]:
    """The (op index, dtype, variant) triples to run: float32 for every op that supports it on
    CPU, the dtypes in `extra_dtypes[op.name]` that the op supports, and the out= variant
    (float32) of every op that supports out=."""
    plan = []
    for index, op in enumerate(op_db):
        supported = op.supported_dtypes("cpu")
        if torch.float32 in supported:
            plan.append((index, "float32", ""))
        extra = extra_dtypes.get(op.name, [])
        plan.extend((index, name, "") for name in extra if getattr(torch, name) in supported)
        if op.supports_out and torch.float32 in supported:
            plan.append((index, "float32", "out"))
    return plan


def main() -> None:
    config = json.loads(sys.argv[1])
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    plan = plan_entries(op_db, config["extra_dtypes"])
    _emit({"event": "plan", "entries": len(plan)})
    for entry in range(config["start"], len(plan)):
        op_index, dtype_name, variant = plan[entry]
        op = op_db[op_index]
        dtype = getattr(torch, dtype_name)
        limit = config["samples_per_out" if variant else "samples_per_op"]
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        record = {
            "event": "result",
            "entry": entry,
            "name": name + (" (out=)" if variant else ""),
            "dtype": dtype_name,
        }
        run = run_out_sample if variant else run_sample
        _emit({**record, "event": "begin", "sample": -1})  # generating the samples
        try:
            samples = list(itertools.islice(op.sample_inputs("cpu", dtype), limit))
        except Exception as error:
            message = "sample_inputs: " + _first_line(error)
            _emit({**record, "sample": -1, "status": "cpu_error", "error": message})
            continue
        _emit({**record, "event": "op", "samples": len(samples)})
        for index, sample in enumerate(samples):
            _emit({**record, "event": "begin", "sample": index})
            began = time.perf_counter()
            status, error = run(op, sample)
            seconds = round(time.perf_counter() - began, 4)
            _emit({**record, "sample": index, "status": status, "error": error, "s": seconds})
    _emit({"event": "done"})


if __name__ == "__main__":
    main()
