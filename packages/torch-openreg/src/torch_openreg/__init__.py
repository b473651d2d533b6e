"""torch_openreg: the PyTorch binding of the OpenReg simulated accelerator.

``import torch_openreg`` registers the ``openreg`` device (PyTorch's
PrivateUse1 slot): the C++ extension ``_C`` (allocators, guard, hooks,
generators, kernels), the ``torch.openreg`` module, and the generated
``Tensor.openreg()`` / ``Tensor.is_openreg`` / ``Module.openreg()`` / storage
methods. With the ``openreg-autoload`` shim installed this happens during
``import torch``.
"""

from __future__ import annotations

# Defined before `import torch`: when this package is imported first, torch's
# backend autoload re-enters it while it is still initialising, and must find
# this function (and do nothing; the outer import finishes the work).
_import_in_progress = True
# Set when the shim asked for the environment check while this package was still
# importing: the import does it once registration is done.
_check_environment_after_import = False


def _autoload(check_environment: bool = False) -> None:
    """Entry point for the openreg-autoload shim: make sure ``openreg`` is registered.

    Cheap and idempotent; safe to call while torch or this package is importing.
    With ``check_environment`` (the shim's ``OPENREG_AUTOLOAD_STRICT=1``), the
    device variables are checked too, which otherwise happens at the first device
    use: an invalid OPENREG_DEVICE_COUNT, OPENREG_DEVICE_MEMORY or OPENREG_FAULT_*
    raises now, naming the variable.
    """
    global _check_environment_after_import
    if _import_in_progress:
        _check_environment_after_import |= check_environment
        return
    _registration.register()
    if check_environment:
        _C._check_runtime()


# torch must be importing or imported before the extension loads (and, first
# thing, so that torch's autoload finds _autoload above).
import torch  # noqa: E402, F401

from ._compat import check_torch_version  # noqa: E402

check_torch_version()

import openreg_runtime  # noqa: E402

openreg_runtime.load_library()

from . import _C, _registration  # noqa: E402
from .openreg import (  # noqa: E402
    current_device,
    device,
    device_count,
    is_available,
    manual_seed,
    set_device,
    synchronize,
)

_registration.register()
_import_in_progress = False
if _check_environment_after_import:
    _C._check_runtime()

__version__ = "0.1.0"

__all__ = [
    "_C",
    "current_device",
    "device",
    "device_count",
    "is_available",
    "manual_seed",
    "set_device",
    "synchronize",
]
