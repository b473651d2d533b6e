"""Availability check of ``torch.openreg.amp`` (mirrors ``torch.cuda.amp.common``)."""

from __future__ import annotations

import torch


def amp_definitely_not_available() -> bool:
    """True when no openreg device can be used, so mixed precision cannot run on one."""
    return not torch.openreg.is_available()


__all__ = ["amp_definitely_not_available"]
