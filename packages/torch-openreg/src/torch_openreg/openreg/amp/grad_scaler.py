"""Deprecated ``torch.openreg.amp.GradScaler`` (mirrors ``torch.cuda.amp.GradScaler``)."""

from __future__ import annotations

import warnings

import torch


class GradScaler(torch.amp.GradScaler):
    """See :class:`torch.amp.GradScaler`; ``torch.openreg.amp.GradScaler(args...)`` is deprecated.

    Use ``torch.amp.GradScaler("openreg", args...)`` instead.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        warnings.warn(
            "`torch.openreg.amp.GradScaler(args...)` is deprecated. "
            "Please use `torch.amp.GradScaler('openreg', args...)` instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(
            "openreg",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


__all__ = ["GradScaler"]
