"""Reads a device's autocast policy out of the installed torch, by observation.

CUDA's autocast rules exist only as compiled kernels in libtorch (the CUDA
build of torch registers them whether or not a GPU is present), so the drift
guard asks the dispatcher which operators have an ``AutocastCUDA`` kernel and
then watches what each kernel does, without a GPU:

* the operator is called on fake tensors (``FakeTensorMode``: metadata only,
  on any device, CUDA included) with autocast enabled for that device;
* a Python kernel registered on the device's Autograd key for every overload of
  the operator intercepts the call that the autocast kernel redispatches
  (autocast sits directly above autograd) and records what it received: the
  overload, the dtype of every tensor argument and any dtype argument. Nothing
  is computed, so any shapes will do.

Each operator is observed under several input patterns (all float32, all in the
lower precision dtype, mixed); the observations tell the policy apart, and the
same probe run on openreg must see the same thing for every operator.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

AUTOCAST_KEYS = {"cuda": "AutocastCUDA", "openreg": "AutocastPrivateUse1"}
AUTOGRAD_KEYS = {"cuda": "AutogradCUDA", "openreg": "AutogradPrivateUse1"}
LOWER_DTYPES = (torch.float16, torch.bfloat16)
# Input patterns: the dtype of the first floating tensor argument, then of the others.
PATTERNS = {
    "all_fp32": ("fp32", "fp32"),
    "all_lower": ("lower", "lower"),
    "first_lower": ("lower", "fp32"),
    "first_fp32": ("fp32", "lower"),
}


def autocast_operators(device: str) -> set[str]:
    """Operators (``aten::name.overload``) with an autocast kernel for ``device``."""
    return set(torch._C._dispatch_get_registrations_for_dispatch_key(AUTOCAST_KEYS[device]))


@dataclass(frozen=True)
class Observation:
    """What the autocast kernel passed on (or the error it raised)."""

    overload: str = ""
    tensor_dtypes: tuple[torch.dtype, ...] = ()
    dtype_arguments: tuple[torch.dtype | None, ...] = ()
    error: str = ""


class _Redispatched(Exception):
    def __init__(self, observation: Observation) -> None:
        super().__init__(observation.overload)
        self.observation = observation


def _split(qualified: str) -> tuple[str, str]:
    name = qualified.removeprefix("aten::")
    base, _, overload = name.partition(".")
    return base, overload or "default"


def _tensors(values: object) -> Iterator[torch.Tensor]:
    for leaf in torch.utils._pytree.tree_leaves(values):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def _intercept(overload_name: str):
    def kernel(*args: object, **kwargs: object) -> object:
        dtype_arguments = tuple(
            value for value in (*args, *kwargs.values()) if isinstance(value, torch.dtype)
        )
        raise _Redispatched(
            Observation(
                overload=overload_name,
                tensor_dtypes=tuple(t.dtype for t in _tensors((args, kwargs))),
                dtype_arguments=dtype_arguments,
            )
        )

    return kernel


@contextlib.contextmanager
def interception(operators: set[str], device: str) -> Iterator[None]:
    """Every overload of ``operators`` raises _Redispatched when it reaches autograd."""
    library = torch.library.Library("aten", "IMPL")
    try:
        bases = sorted({_split(name)[0] for name in operators})
        with warnings.catch_warnings():
            # Overriding a kernel that torch registered for this key warns; intended here.
            warnings.simplefilter("ignore")
            for base in bases:
                packet = getattr(torch.ops.aten, base)
                for overload in packet.overloads():
                    name = base if overload == "default" else f"{base}.{overload}"
                    library.impl(name, _intercept(name), AUTOGRAD_KEYS[device])
        yield
    finally:
        library._destroy()


class ProbeError(AssertionError):
    """The probe cannot build a call for an operator (a new kind of argument)."""


def _argument(
    argument: torch._C.Argument, tensors: tuple[object, object], qualified: str
) -> tuple[bool, object]:
    """(provide?, value) for one schema argument; ``tensors``: (this slot's, the next one's)."""
    kind = str(argument.type)
    if kind in ("Tensor", "Optional[Tensor]"):
        return True, tensors[0]
    if kind == "List[Tensor]":
        return True, list(tensors)
    if kind == "List[Optional[Tensor]]":
        return True, [None]
    if argument.has_default_value():
        return False, argument.default_value
    simple: dict[str, object] = {
        "int": 1,
        "SymInt": 1,
        "float": 1.0,
        "bool": False,
        "number": 2,
        "str": "",
        "List[int]": [1],
        "List[SymInt]": [1],
        "List[float]": [1.0],
        "List[bool]": [True],
    }
    if kind in simple:
        return True, simple[kind]
    if kind.startswith("Optional["):
        return True, None
    if kind.startswith("List[bool]") or kind.startswith("bool["):
        return True, [True]
    raise ProbeError(
        f"the autocast probe cannot build argument {argument.name!r} of type {kind} for "
        f"{qualified}: teach tests/_autocast_probe.py::_argument that type"
    )


def _call(qualified: str, make_tensor: list[object]) -> None:
    base, overload = _split(qualified)
    op = getattr(getattr(torch.ops.aten, base), overload)
    positional: list[object] = []
    keyword: dict[str, object] = {}
    pending_defaults: list[object] = []
    tensor_index = 0
    for argument in op._schema.arguments:
        is_tensor_slot = "Tensor" in str(argument.type)
        slot = (make_tensor[min(tensor_index, 1)], make_tensor[1])
        provide, value = _argument(argument, slot, qualified)
        if is_tensor_slot:
            tensor_index += 1
        if argument.kwarg_only:
            if provide:
                keyword[argument.name] = value
            continue
        if provide:
            positional.extend(pending_defaults)
            pending_defaults.clear()
            positional.append(value)
        else:
            pending_defaults.append(value)
    op(*positional, **keyword)


@contextlib.contextmanager
def _autocast_enabled(device: str, lower: torch.dtype) -> Iterator[None]:
    # The low-level switches: torch.autocast("cuda") refuses to enable itself
    # without a GPU, but the dispatcher's CUDA autocast kernels work on fake tensors.
    enabled, dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_enabled(device, True)
    torch.set_autocast_dtype(device, lower)
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(cache)


def observe(qualified: str, device: str, lower: torch.dtype, pattern: str) -> Observation:
    """What the ``device`` autocast kernel of ``qualified`` redispatches, for one input pattern.

    Must run inside ``interception(...)`` for the same device.
    """
    mode = FakeTensorMode()
    dtypes = [torch.float32 if which == "fp32" else lower for which in PATTERNS[pattern]]
    with mode:
        tensors: list[object] = [torch.empty(2, 2, dtype=d, device=device) for d in dtypes]
    try:
        with _autocast_enabled(device, lower), mode:
            _call(qualified, tensors)
    except _Redispatched as redispatched:
        return redispatched.observation
    except RuntimeError as error:
        return Observation(error=str(error))
    return Observation(error="returned without reaching autograd")


def observe_all(
    operators: set[str], device: str
) -> dict[str, dict[tuple[torch.dtype, str], Observation]]:
    """observe() for every operator, lower precision dtype and input pattern."""
    results: dict[str, dict[tuple[torch.dtype, str], Observation]] = {}
    with interception(operators, device):
        for qualified in sorted(operators):
            results[qualified] = {
                (lower, pattern): observe(qualified, device, lower, pattern)
                for lower in LOWER_DTYPES
                for pattern in PATTERNS
            }
    return results


def classify(observations: dict[tuple[torch.dtype, str], Observation], qualified: str) -> str:
    """The policy name (as in ATen's CastPolicy, or "banned") that explains the observations."""
    lower = torch.float16
    every = observations[(lower, "all_fp32")]
    low = observations[(lower, "all_lower")]
    mixed = observations[(lower, "first_lower")]
    errors = {observation.error for observation in observations.values()}
    if errors != {""}:
        if len(errors) == 1 and "unsafe to autocast" in every.error:
            return "banned"
        return "error: " + " | ".join(sorted(errors))
    if set(every.tensor_dtypes) == {lower}:
        return "lower_precision_fp"
    if set(low.tensor_dtypes) == {torch.float32}:
        return "fp32"
    if torch.float32 in low.dtype_arguments:
        same_overload = low.overload == qualified.removeprefix("aten::")
        return "fp32_set_opt_dtype" if same_overload else "fp32_append_dtype"
    if set(mixed.tensor_dtypes) == {torch.float32}:
        return "promote"
    return "unchanged"


def registration_site(qualified: str, device: str) -> str:
    """The source file that registered the autocast kernel (from the dispatcher's dump)."""
    key = AUTOCAST_KEYS[device]
    for line in torch._C._dispatch_dump(qualified).splitlines():
        if line.startswith(f"{key}: registered at "):
            return line.removeprefix(f"{key}: registered at ").split(":")[0]
    return ""


def policy_differences(
    cuda: dict[str, dict[tuple[torch.dtype, str], Observation]],
    openreg: dict[str, dict[tuple[torch.dtype, str], Observation]],
    declared: dict[str, str],
) -> list[str]:
    """Every way openreg's autocast differs from CUDA's, one readable line each."""
    differences = []
    for name in sorted(cuda.keys() - openreg.keys()):
        differences.append(
            f"{name}: CUDA autocasts it ({classify(cuda[name], name)}), openreg has no rule"
        )
    for name in sorted(openreg.keys() - cuda.keys()):
        differences.append(f"{name}: openreg autocasts it, CUDA has no rule")
    for name in sorted(cuda.keys() & openreg.keys()):
        expected = classify(cuda[name], name)
        if declared.get(name) != expected:
            differences.append(
                f"{name}: CUDA's kernel behaves as {expected}, "
                f"openreg declares {declared.get(name)}"
            )
        for case, seen in cuda[name].items():
            if openreg[name][case] != seen:
                differences.append(
                    f"{name} with {case[0]}, inputs {case[1]}: CUDA passes on {seen}, "
                    f"openreg passes on {openreg[name][case]}"
                )
    return differences
