"""Dynamo's view of the openreg device (``torch._dynamo.device_interface``).

Dynamo traces device code through a ``DeviceInterface`` per device type: which
functions create and switch streams and events (so ``torch.openreg.stream(s)``,
``torch.openreg.Event()``, ``current_stream()`` become graph nodes instead of
graph breaks), how to guard and query devices, and what compile workers may ask
about a device without using it (``Worker``). Every entry is the function
``torch.openreg`` exposes for the same purpose, so traced and eager code call the
same objects — Dynamo matches them by identity.

openreg reports itself as *not* a GPU (``is_gpu() is False``): Inductor then
generates C++ kernels with its CPU code generator (see inductor.py) rather than
Triton, and treats the device as a host-like one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
from pathlib import Path
from typing import Any

import torch
from torch._dynamo import device_interface as dynamo_devices

from .. import _C, openreg
from ..openreg import streams

_NAME = "openreg"


def _device_index(device: torch.types.Device) -> int:
    """Index of an openreg device given as int, str, torch.device or None (current)."""
    if device is None:
        return OpenRegInterface.Worker.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _NAME:
            raise ValueError(f"expected an openreg device, got {device}")
        return OpenRegInterface.Worker.current_device() if device.index is None else device.index
    return int(device)


@functools.cache
def _codegen_fingerprint() -> str:
    digest = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


class OpenRegInterface(dynamo_devices.DeviceInterface):
    """The openreg device as Dynamo and Inductor see it."""

    device = openreg.device  # type: ignore[assignment]
    Event = streams.Event  # type: ignore[assignment]
    Stream = streams.Stream  # type: ignore[assignment]

    class Worker:
        """Device facts for compile workers, recorded once per process."""

        @staticmethod
        def set_device(device: int) -> None:
            dynamo_devices.caching_worker_current_devices[_NAME] = device

        @staticmethod
        def current_device() -> int:
            if _NAME in dynamo_devices.caching_worker_current_devices:
                return dynamo_devices.caching_worker_current_devices[_NAME]
            return openreg.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            index = _device_index(device)
            cached = dynamo_devices.caching_worker_device_properties
            if _NAME not in cached:
                cached[_NAME] = [
                    openreg.get_device_properties(i) for i in range(openreg.device_count())
                ]
            return cached[_NAME][index]

    current_device = staticmethod(openreg.current_device)
    set_device = staticmethod(openreg.set_device)  # type: ignore[assignment]
    exchange_device = staticmethod(_C._exchange_device)
    maybe_exchange_device = staticmethod(_C._exchange_device)
    device_count = staticmethod(openreg.device_count)
    is_available = staticmethod(openreg.is_available)
    stream = staticmethod(streams.stream)  # type: ignore[assignment]
    current_stream = staticmethod(streams.current_stream)  # type: ignore[assignment]
    set_stream = staticmethod(streams.set_stream)
    synchronize = staticmethod(openreg.synchronize)  # type: ignore[assignment]
    get_device_properties = staticmethod(openreg.get_device_properties)  # type: ignore[assignment]
    memory_allocated = staticmethod(openreg.memory.memory_allocated)  # type: ignore[assignment]

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.accelerator.set_stream(
            torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        )

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        """The runtime handle (``orStream_t``) of the device's current stream."""
        return _C._current_raw_stream(device_idx)

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        # Kernels are host C++: there is no hardware generation to tell apart.
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False

    @staticmethod
    def is_gpu() -> bool:
        return False

    @classmethod
    def get_multi_processor_count(cls, device: torch.types.Device = None) -> int:
        return cls.Worker.get_device_properties(device).multi_processor_count

    @classmethod
    def get_cache_system_info(cls) -> dict[str, object] | None:
        # Cached wrapper code calls this binding's launcher and was generated by
        # this package's code generator: another version of either (also an
        # edited source tree) must not reuse it.
        return {
            "torch_openreg": importlib.metadata.version("torch-openreg"),
            "codegen": _codegen_fingerprint(),
            "cpu_count": os.cpu_count(),
        }


# How Dynamo treats torch.openreg's functions: the rules it has for the
# torch.cuda functions of the same names. "In graph" functions are not traced
# into (their bodies call the binding); Dynamo evaluates, folds or handles them.
_IN_GRAPH = (
    "current_device",
    "current_stream",
    "default_stream",
    "device_count",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "is_initialized",
    "set_stream",
    "stream",
    "synchronize",
)
_SKIPPED = ("set_device", "manual_seed", "manual_seed_all", "get_rng_state", "set_rng_state")
# Folded to constants while tracing; the first two guard on their value.
_FOLDED_GUARDED = ("current_device", "is_initialized")
_FOLDED = ("device_count", "get_device_properties", "is_available")


def _teach_dynamo_openreg_functions() -> None:
    from torch._dynamo import trace_rules
    from torch._dynamo.variables import torch as torch_variables
    from torch._dynamo.variables.constant import ConstantVariable
    from torch._dynamo.variables.functions import SkipFunctionVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    rules = trace_rules.manual_torch_name_rule_map
    for name in _IN_GRAPH:
        rules[f"torch.{_NAME}.{name}"] = TorchInGraphFunctionVariable
    for name in _SKIPPED:
        rules[f"torch.{_NAME}.{name}"] = SkipFunctionVariable
    trace_rules.get_torch_obj_rule_map.cache_clear()
    for name in _FOLDED_GUARDED:
        torch_variables.constant_fold_functions_need_guards[getattr(openreg, name)] = None
        torch_variables.constant_fold_functions[getattr(openreg, name)] = None
    for name in _FOLDED:
        torch_variables.constant_fold_functions[getattr(openreg, name)] = None

    # Handlers keyed by function (a cached table): current_stream and
    # synchronize as for torch.cuda, defaulting to the openreg device.
    handlers = TorchInGraphFunctionVariable._get_handlers()
    current_stream = handlers[torch.cuda.current_stream]

    def handle_current_stream(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            args = (ConstantVariable.create(_NAME),)
        return current_stream(self, tx, *args, **kwargs)

    def handle_synchronize(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device", args[0] if args else None)
        value = None if device is None else device.as_python_constant()
        # No index: the device current when the graph runs, as eager.
        index = None
        if value is not None:
            device = torch.device(_NAME, value) if isinstance(value, int) else torch.device(value)
            if device.type != _NAME:
                raise ValueError(
                    f"torch.openreg.synchronize: expected an openreg device, got {value}"
                )
            index = device.index
        tx.output.create_proxy(
            "call_function", torch.ops.streams.synchronize_device, (_NAME, index), {}
        )
        return ConstantVariable.create(None)

    handlers[openreg.current_stream] = handle_current_stream
    handlers[openreg.synchronize] = handle_synchronize


def register() -> None:
    """Register OpenRegInterface for the ``openreg`` device type (idempotent)."""
    if dynamo_devices.device_interfaces.get(_NAME) is not OpenRegInterface:
        dynamo_devices.register_interface_for_device(_NAME, OpenRegInterface)
        _teach_dynamo_openreg_functions()
