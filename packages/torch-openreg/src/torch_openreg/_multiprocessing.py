"""Sending openreg tensors to other processes: refused at the sender, clearly.

``torch.multiprocessing`` pickles a tensor by sharing its memory (a file
descriptor for CPU tensors, an IPC handle for CUDA ones). openreg memory cannot
be shared between processes yet, and torch's generic path fails with
"_share_fd_: only available on CPU" — inside a queue's feeder thread, so the
receiver waits forever. This module wraps torch's reducers so that pickling an
openreg tensor or storage for another process raises an error naming openreg and
the way out (send ``tensor.cpu()``, move it back in the receiver); everything
else is pickled by torch's reducers unchanged.

Where the error surfaces is the sending primitive's: ``Connection.send``,
``SimpleQueue.put`` and process arguments pickle in the caller, which gets the
exception; ``multiprocessing.Queue.put`` pickles in a background thread, which
prints it, and the object is not sent.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

_MESSAGE = (
    "Cannot send an openreg {kind} to another process: openreg device memory cannot be "
    "shared between processes. Send a CPU copy instead ({kind}.cpu()) and move it to the "
    "device in the receiving process (.to('openreg'))."
)

Reducer = Callable[[Any], Any]


def _device_type(obj: Any) -> str:
    # A TypedStorage's own .device warns that TypedStorage is deprecated.
    if isinstance(obj, torch.storage.TypedStorage):
        return obj._untyped_storage.device.type
    return obj.device.type


def _refusing(reducer: Reducer, kind: str) -> Reducer:
    def reduce(obj: Any) -> Any:
        if _device_type(obj) == "openreg":
            raise RuntimeError(_MESSAGE.format(kind=kind))
        return reducer(obj)

    reduce.__wrapped__ = reducer  # type: ignore[attr-defined]
    return reduce


def install_reducers() -> None:
    """Wrap torch's multiprocessing reducers of tensors and storages (idempotent)."""
    import torch.multiprocessing

    tensor_types = [torch.Tensor, torch.nn.Parameter, *torch._tensor_classes]
    storage_types = [torch.storage.TypedStorage, *torch._storage_classes]
    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    for types, kind in ((tensor_types, "tensor"), (storage_types, "storage")):
        for cls in types:
            reducer = reducers.get(cls)
            if reducer is None or hasattr(reducer, "__wrapped__"):
                continue
            ForkingPickler.register(cls, _refusing(reducer, kind))
