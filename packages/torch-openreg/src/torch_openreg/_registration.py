"""Registers the openreg device with PyTorch (idempotent).

Order matters: the C++ side first (hooks, kernel allocator), then the
PrivateUse1 rename, the ``torch.openreg`` module, and the generated
convenience methods, which need the name and the module; then the
torch.distributed backend for the device.
"""

from __future__ import annotations

import sys

import torch

from . import _C, _compile, _exit, _multiprocessing, distributed, openreg

BACKEND_NAME = "openreg"
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
    _exit.install()
    _compile.install()
    _C._mark_initialized()
    _registered = True
