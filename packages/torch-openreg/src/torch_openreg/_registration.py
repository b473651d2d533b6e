"""Registers the openreg device with PyTorch (idempotent).

Order matters: the C++ side first (hooks, kernel allocator), then the
PrivateUse1 rename, the ``torch.openreg`` module, and the generated
convenience methods, which need the name and the module; then the
torch.distributed backend for the device.
"""

from __future__ import annotations

import atexit
import os
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
    Threads Python does not wait for must stop touching Python objects: one
    that asks for the GIL while the interpreter finalizes aborts the process.
    An autograd device thread lets go of a finished backward's graph task
    (which holds Python objects) just after the backward has returned, so
    exit first waits for those threads to be idle; then the process group's
    helpers and Gloo's workers finishing orgloo collectives are told to keep
    what they would let go.

    An error of queued work that nothing synchronized for (an asynchronous
    kernel that failed at the end of a program) would be lost here: it is
    reported on stderr and the process exits with status 1, as after an
    unhandled exception.
    """
    pending: list[str] = []
    try:
        _wait_for_autograd_threads()
        # A program that never used a device has nothing queued (and, with an
        # invalid OPENREG_DEVICE_COUNT, must not be warned about it at exit).
        if openreg.is_initialized():
            for index in range(_C._device_count()):
                try:
                    _C._synchronize(index)
                except RuntimeError as error:
                    pending.append(_pending_error_report(index, error))
    finally:
        _C._close_for_python_exit()
    if pending:
        _report_at_exit(pending)
        _C._exit_with_failure_status()


def _pending_error_report(index: int, error: RuntimeError) -> str:
    message = " ".join(str(error).split())  # one line, whatever the error's layout
    return (
        f"openreg: an error of work queued on openreg:{index} was still pending at exit, "
        f"with nothing synchronizing after it: {message}"
    )


def _report_at_exit(lines: list[str]) -> None:
    text = "".join(f"{line}\n" for line in lines)
    if sys.stderr is not None:
        sys.stderr.write(text)
        sys.stderr.flush()
    else:  # pythonw, or a program that closed it: the file descriptor is still there
        os.write(2, text.encode(errors="replace"))


def _wait_for_autograd_threads() -> None:
    autograd_threads = _thread_state.threads_named(_thread_state.AUTOGRAD_THREAD_PREFIX)
    _thread_state.wait_until_idle(autograd_threads, _AUTOGRAD_IDLE_LIMIT_S)
