"""openreg tensors across processes: zero-copy sharing through torch.multiprocessing.

``torch.multiprocessing`` pickles a tensor as its storage plus its view (offset,
sizes, strides, dtype, ``requires_grad``, ``Parameter``-ness); torch's own
reducers do that part for every device. This module adds what openreg storages
need, as torch does for CUDA (design: ``docs/ipc.md``):

* **Memory**: the storage's bytes travel as a runtime IPC handle whose file
  descriptor is passed like a CPU tensor's (``SentDescriptors``); the receiver
  maps the same device memory (``_C._ipc_open_storage``). No byte is copied.
* **Lifetime**: the sender's block is held by its allocator while any receiver
  maps it (``torch.openreg.ipc_collect`` frees those let go of); the receiver's
  mapping closes when its storage dies. Received twice, a storage is the same
  storage (torch's ``shared_cache``), also back in the process that sent it.
* **Order**: work still queued on the sender's current stream is waited for by
  the receiver's current stream (an interprocess event recorded at the send).
* **Never hang**: what cannot be sent raises at the sender, in the caller's
  thread — also for ``multiprocessing.Queue.put``, which otherwise pickles in a
  feeder thread that only prints the error while the receiver waits forever (the
  queue's ``put`` is wrapped with the same check). Should pickling still fail in
  a feeder thread, the receiver gets the error from ``get()`` instead.

Start methods: spawn and forkserver. A process forked after openreg was used
cannot use the device at all, so it cannot receive openreg tensors either (the
rebuild raises there, naming the start methods that work).
"""

from __future__ import annotations

import functools
import multiprocessing.queues
import os
import threading
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef, shared_cache, storage_from_cache

from . import _C
from .openreg._fork import _is_in_bad_fork
from .openreg._ipc import SentDescriptors

Reducer = Callable[[Any], Any]

_BAD_FORK_RECEIVER = (
    "Cannot receive an openreg tensor in a process forked from one that used openreg: the "
    "device cannot be used after fork. Start the receiving process with the 'spawn' or "
    "'forkserver' start method."
)


# ---- What cannot be sent -------------------------------------------------------------


def _device_refusal(index: int | None) -> str | None:
    """Why memory of openreg:``index`` cannot be sent now, or None."""
    if _is_in_bad_fork():
        return (
            "Cannot send an openreg tensor from a process forked after openreg was used: the "
            "device cannot be used here. Start this process with the 'spawn' or 'forkserver' "
            "start method."
        )
    # Processes started from now on (spawn, forkserver) see this environment.
    configured = os.environ.get("OPENREG_DEVICE_COUNT", "").strip()
    if index is not None and configured.isdigit() and index >= int(configured):
        return (
            f"Cannot send a tensor on openreg:{index} to another process: processes started "
            f"now see {configured} openreg devices (OPENREG_DEVICE_COUNT={configured} in this "
            f"process's environment), so the receiver could not map memory of device {index}. "
            f"Give both processes the same OPENREG_DEVICE_COUNT (this process has "
            f"{_C._device_count()}), or move the tensor to a device below {configured}."
        )
    return None


def _tensor_refusal(tensor: torch.Tensor) -> str | None:
    if tensor.device.type != "openreg":
        return None
    if tensor.requires_grad and not tensor.is_leaf:
        # torch's own refusal (reduce_tensor), raised here in the caller's thread.
        return (
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
            "does not support crossing process boundaries.  If you just want to transfer the "
            "data, call detach() on the tensor before serializing (e.g., putting it on the queue)."
        )
    return _device_refusal(tensor.device.index)


def _refusal(obj: object, depth: int = 0) -> str | None:
    """Why ``obj`` (or an openreg tensor, storage or event in its containers) cannot be sent."""
    if isinstance(obj, torch.Tensor):
        return _tensor_refusal(obj)
    if isinstance(obj, torch.UntypedStorage | torch.storage.TypedStorage):
        device = _storage_device(obj)
        return _device_refusal(device.index) if device.type == "openreg" else None
    if depth >= 8:
        return None
    items: Any = ()
    if isinstance(obj, list | tuple | set | frozenset):
        items = obj
    elif isinstance(obj, dict):
        items = obj.values()
    for item in items:
        refusal = _refusal(item, depth + 1)
        if refusal is not None:
            return refusal
    return None


def _storage_device(storage: Any) -> torch.device:
    # A TypedStorage's own .device warns that TypedStorage is deprecated.
    if isinstance(storage, torch.storage.TypedStorage):
        return storage._untyped_storage.device
    return storage.device


def _in_queue_feeder_thread() -> bool:
    return threading.current_thread().name == "QueueFeederThread"


def _raise_in_receiver(message: str) -> None:
    raise RuntimeError(f"The sending process could not send this object: {message}")


def _delivering_failures(reducer: Reducer) -> Reducer:
    """``reducer``, except that in a queue's feeder thread (where an exception is only
    printed and nothing is sent) a failure is sent to the receiver, whose ``get()`` raises."""

    @functools.wraps(reducer)
    def reduce(obj: Any) -> Any:
        try:
            return reducer(obj)
        except Exception as error:
            if not _in_queue_feeder_thread():
                raise
            return (_raise_in_receiver, (str(error),))

    return reduce


# ---- Storages ------------------------------------------------------------------------


def _cache_key(memory_id: int, offset: int, size: int) -> tuple[str, int, int, int]:
    return ("openreg", memory_id, offset, size)


def _reduce_openreg_storage(storage: torch.UntypedStorage) -> Any:
    refusal = _device_refusal(storage.device.index)
    if refusal is not None:
        raise RuntimeError(refusal)
    if storage.nbytes() == 0:
        return (_rebuild_empty_storage, (storage.device.index,))
    memory, event = _C._ipc_share_storage(storage)
    descriptors = [memory[0]] + ([event[0]] if event is not None else [])
    try:
        sent = SentDescriptors(descriptors)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)
    # Sent back here, the storage is this one again.
    shared_cache[_cache_key(*memory[2:5])] = StorageWeakRef(storage)
    return (
        _rebuild_openreg_storage,
        (sent, memory[1:], event[1:] if event is not None else None),
    )


def _rebuild_empty_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device("openreg", device))


def _rebuild_openreg_storage(
    sent: SentDescriptors, memory: tuple[Any, ...], event: tuple[Any, ...] | None
) -> torch.UntypedStorage:
    descriptors = sent.detach()  # fetched in any case: the sender then lets go of its copies
    try:
        if _is_in_bad_fork():
            raise RuntimeError(_BAD_FORK_RECEIVER)
        key = _cache_key(*memory[1:4])
        storage = storage_from_cache(torch.UntypedStorage, key)
        if storage is None:
            storage = _C._ipc_open_storage((descriptors[0], *memory))
            shared_cache[key] = StorageWeakRef(storage)
        if event is not None:
            _C._ipc_wait_event((descriptors[1], *event))
        return storage
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _sharing(reducer: Reducer) -> Reducer:
    """torch's storage reducer, with openreg storages shared by this module."""

    @_delivering_failures
    def reduce(storage: Any) -> Any:
        if storage.device.type == "openreg":
            return _reduce_openreg_storage(storage)
        return reducer(storage)

    reduce.__wrapped__ = reducer  # type: ignore[attr-defined]
    return reduce


def _checked(reducer: Reducer) -> Reducer:
    """torch's tensor reducer, refusing (in the caller's thread) what cannot be sent."""

    @_delivering_failures
    def reduce(tensor: Any) -> Any:
        refusal = _tensor_refusal(tensor)
        if refusal is not None:
            raise RuntimeError(refusal)
        return reducer(tensor)

    reduce.__wrapped__ = reducer  # type: ignore[attr-defined]
    return reduce


# ---- Queues ------------------------------------------------------------------------


def _checking_put(put: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(put)
    def checked_put(self: Any, obj: object, *args: Any, **kwargs: Any) -> None:
        refusal = _refusal(obj)
        if refusal is not None:
            raise RuntimeError(refusal)
        put(self, obj, *args, **kwargs)

    checked_put.__wrapped__ = put  # type: ignore[attr-defined]
    return checked_put


def install_reducers() -> None:
    """Share openreg storages through torch's multiprocessing reducers (idempotent)."""
    import torch.multiprocessing  # registers torch's reducers

    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    tensor_reducer = reducers.get(torch.Tensor)
    if tensor_reducer is not None and not hasattr(tensor_reducer, "__wrapped__"):
        for cls in (torch.Tensor, torch.nn.Parameter, *torch._tensor_classes):
            if reducers.get(cls) is tensor_reducer:
                ForkingPickler.register(cls, _checked(tensor_reducer))
    storage_reducer = reducers.get(torch.UntypedStorage)
    if storage_reducer is not None and not hasattr(storage_reducer, "__wrapped__"):
        ForkingPickler.register(torch.UntypedStorage, _sharing(storage_reducer))
    for queue in (multiprocessing.queues.Queue, multiprocessing.queues.JoinableQueue):
        if not hasattr(queue.put, "__wrapped__"):
            queue.put = _checking_put(queue.put)  # type: ignore[method-assign]
