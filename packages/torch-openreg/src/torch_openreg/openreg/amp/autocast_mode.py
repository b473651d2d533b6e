"""Deprecated ``torch.openreg.amp`` autocast aliases (mirror ``torch.cuda.amp.autocast_mode``)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

_Function = TypeVar("_Function", bound=Callable[..., object])


def _warn_deprecated(old: str, new: str) -> None:
    # stacklevel 3: the warning points at the user's line, not at this module.
    warnings.warn(
        f"`torch.openreg.amp.{old}` is deprecated. Please use `{new}` instead.",
        FutureWarning,
        stacklevel=3,
    )


class autocast(torch.amp.autocast):
    """See :class:`torch.autocast`; ``torch.openreg.amp.autocast(args...)`` is deprecated.

    Use ``torch.amp.autocast("openreg", args...)`` instead. The default dtype is
    ``torch.float16``, as for ``torch.cuda.amp.autocast``.
    """

    def __init__(
        self,
        enabled: bool = True,
        dtype: torch.dtype = torch.float16,
        cache_enabled: bool = True,
    ) -> None:
        _warn_deprecated("autocast(args...)", "torch.amp.autocast('openreg', args...)")
        super().__init__("openreg", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def custom_fwd(
    fwd: _Function | None = None, *, cast_inputs: torch.dtype | None = None
) -> _Function | Callable[[_Function], _Function]:
    """``torch.amp.custom_fwd(..., device_type="openreg")``; this alias is deprecated."""
    _warn_deprecated("custom_fwd(args...)", "torch.amp.custom_fwd(args..., device_type='openreg')")
    return functools.partial(torch.amp.custom_fwd, device_type="openreg")(
        fwd=fwd, cast_inputs=cast_inputs
    )


def custom_bwd(bwd: _Function) -> _Function:
    """``torch.amp.custom_bwd(..., device_type="openreg")``; this alias is deprecated."""
    _warn_deprecated("custom_bwd(args...)", "torch.amp.custom_bwd(args..., device_type='openreg')")
    return functools.partial(torch.amp.custom_bwd, device_type="openreg")(bwd)


__all__ = ["autocast", "custom_bwd", "custom_fwd"]
