"""torch.openreg.amp: what ``torch.cuda.amp`` offers, for the openreg device.

Like ``torch.cuda.amp`` these names are deprecated aliases kept for code
written before the device-generic API: each warns with a ``FutureWarning``
naming its replacement (``torch.amp.autocast("openreg", ...)``,
``torch.amp.GradScaler("openreg", ...)``,
``torch.amp.custom_fwd(..., device_type="openreg")``) and then behaves
exactly like it.
"""

from __future__ import annotations

from .autocast_mode import autocast, custom_bwd, custom_fwd
from .common import amp_definitely_not_available
from .grad_scaler import GradScaler

__all__ = [
    "GradScaler",
    "amp_definitely_not_available",
    "autocast",
    "custom_bwd",
    "custom_fwd",
]
