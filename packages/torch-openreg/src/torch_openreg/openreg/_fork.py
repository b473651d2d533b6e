"""Forked children of a process that used openreg (mirrors torch.cuda's bad-fork rule).

The runtime cannot be used in a child forked after a device was used (its
stream workers and memory mappings do not survive ``fork``); the runtime
refuses every device call there, naming the ``spawn`` start method. This module
makes the Python side agree, as ``torch.cuda`` does: in such a child
``_is_in_bad_fork()`` is true, ``is_initialized()`` false, and initialisation —
``torch.openreg.init()``, or torch's lazy initialisation on the first device
call (``torch.ones(..., device="openreg")``, ``.to("openreg")``) — raises
CUDA's error with openreg's name.

Some device state lives in the binding, not in the runtime, and ``fork`` copies
it: the allocator's statistics, the stream pools, the current device. So every
``torch.openreg`` call that reads or changes a device's state calls
``_lazy_init()`` first, as torch.cuda's functions do, and raises the same error
(streams, events, memory statistics and controls, the current device, device
names and properties). What describes the installation rather than a device —
``device_count()``, ``is_available()``, the debug and sync-debug switches —
still answers.
"""

from __future__ import annotations

import os

from .. import _C

_in_bad_fork = False


def _is_in_bad_fork() -> bool:
    """True in a child forked after this process (or an ancestor) used an openreg device."""
    return _in_bad_fork


def _after_fork_in_child() -> None:
    global _in_bad_fork
    if _in_bad_fork or _C._is_initialized():
        _in_bad_fork = True
        # torch then calls _lazy_init() again on the next device call.
        _C._require_lazy_init_after_fork()


def _lazy_init() -> None:
    """Called by torch before the first device call of a process (and again after a bad
    fork), and by torch.openreg's calls on device state: raises in a bad fork."""
    if _in_bad_fork:
        raise RuntimeError(
            "Cannot re-initialize openreg in forked subprocess. To use openreg with "
            "multiprocessing, you must use the 'spawn' start method"
        )


os.register_at_fork(after_in_child=_after_fork_in_child)
