"""torch.openreg: the device module of the OpenReg simulated accelerator.

Mirrors ``torch.cuda`` wherever the concept exists, so code written for one
reads the same for the other. Each public name is declared once, in the
submodule that implements it (with that submodule's ``__all__``); this
package's ``__all__`` is theirs together.
"""

from __future__ import annotations

from .. import _C
from . import (
    _utils,
    amp,
    debug,
    devices,
    graphs,
    memory,
    monitoring,
    properties,
    random,
    streams,
    sync_debug,
)
from ._fork import _is_in_bad_fork as _is_in_bad_fork
from ._fork import _lazy_init as _lazy_init
from .devices import *  # noqa: F403
from .graphs import *  # noqa: F403
from .memory import *  # noqa: F403
from .monitoring import *  # noqa: F403
from .properties import *  # noqa: F403
from .random import *  # noqa: F403
from .streams import *  # noqa: F403
from .streams import _sleep as _sleep
from .sync_debug import *  # noqa: F403

__all__ = ["_utils", "amp", "debug", "graphs", "memory"]
__all__ += devices.__all__
__all__ += graphs.__all__
__all__ += memory.__all__
__all__ += monitoring.__all__
__all__ += properties.__all__
__all__ += random.__all__
__all__ += streams.__all__
__all__ += sync_debug.__all__


def _inductor_backend_init() -> None:
    """Called by Inductor the first time it compiles for openreg: registers the backend."""
    from .._compile import register_inductor_backend

    register_inductor_backend()


def __getattr__(name: str) -> object:
    # default_generators is created on first use: creating generators
    # requires the device count, which reads the environment.
    if name == "default_generators":
        return tuple(_C._get_default_generator(i) for i in range(devices.device_count()))
    # torch.cuda's flag, read by device-generic code: torch.utils.checkpoint saves
    # and restores a device's RNG state only if its module says it is initialised.
    if name == "_initialized":
        return devices.is_initialized()
    raise AttributeError(f"module 'torch.openreg' has no attribute {name!r}")
