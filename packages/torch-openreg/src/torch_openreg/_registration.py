"""Registers the openreg device with PyTorch (idempotent).

Order matters: the C++ side first (hooks, kernel allocator), then the
PrivateUse1 rename, the ``torch.openreg`` module, and the generated
convenience methods, which need the name and the module; then the
torch.distributed backend for the device.
"""

from __future__ import annotations

import atexit
import sys

import torch

from . import _C, _compile, _multiprocessing, _thread_state, distributed, openreg

BACKEND_NAME = "openreg"
# How long exit waits at most for a busy autograd device thread (one still
# running a backward started by a daemon thread, say); PyTorch's engine gives
# its device threads as long to stop.
_AUTOGRAD_IDLE_LIMIT_S = 10.0
_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    _C._init()
    openreg.debug._start()
    current = torch._C._get_privateuse1_backend_name()
    if current != BACKEND_NAME:
        if current != "privateuseone":
            raise ImportError(
                f"cannot register the openreg device: PyTorch's PrivateUse1 slot is already "
                f"taken by the '{current}' backend; only one such backend can be loaded per process"
            )
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    # torch.accelerator.Graph finds graph implementations by the backend's name.
    _C._register_graph_impl()
    torch._register_device_module(BACKEND_NAME, openreg)
    # `from torch.openreg.amp import GradScaler` must find the same module (as with torch.cuda.amp).
    sys.modules[f"torch.{BACKEND_NAME}.amp"] = openreg.amp
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
    )
    distributed.register()
    _multiprocessing.install_reducers()
    atexit.register(_drain_devices)
    _compile.install()
    _C._mark_initialized()
    _registered = True


def _drain_devices() -> None:
    """Let device work finish, and threads let go of Python, before the interpreter tears down.

    Stream workers run CPU kernels that use PyTorch's process-wide state
    (thread pools, allocators); finishing them first keeps exit orderly.
    Failures are not reported here: nobody could act on them any more.
    Threads Python does not wait for must stop touching Python objects: one
    that asks for the GIL while the interpreter finalizes aborts the process.
    An autograd device thread lets go of a finished backward's graph task
    (which holds Python objects) just after the backward has returned, so
    exit first waits for those threads to be idle; then the process group's
    helpers and Gloo's workers finishing orgloo collectives are told to keep
    what they would let go.
    """
    try:
        _wait_for_autograd_threads()
        for index in range(_C._device_count()):
            if not openreg.is_initialized():
                return
            try:
                _C._synchronize(index)
            except RuntimeError:
                pass
    finally:
        _C._close_for_python_exit()


def _wait_for_autograd_threads() -> None:
    autograd_threads = _thread_state.threads_named(_thread_state.AUTOGRAD_THREAD_PREFIX)
    _thread_state.wait_until_idle(autograd_threads, _AUTOGRAD_IDLE_LIMIT_S)
