"""Device argument normalisation shared by torch.openreg functions."""

from __future__ import annotations

from typing import TypeAlias

import torch

# What torch.cuda functions accept as a device.
DeviceLike: TypeAlias = "torch.device | str | int | None"


def _get_device_index(device: DeviceLike, optional: bool = False) -> int:
    """The openreg device index of ``device``; ``None``/no index means current.

    Accepts an int, ``"openreg"``, ``"openreg:1"`` or a ``torch.device``.
    Used by torch.serialization to map ``"openreg:N"`` locations.
    """
    from . import current_device

    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "openreg":
            raise ValueError(f"Expected an openreg device, but got: {device}")
        index = device.index
    elif device is None or isinstance(device, int):
        index = device
    else:
        raise TypeError(
            f"Expected an int, str or torch.device for an openreg device, got {device!r}"
        )
    if index is None:
        if not optional:
            raise ValueError(f"Expected an openreg device with a specified index, got {device!r}")
        return current_device()
    return index
