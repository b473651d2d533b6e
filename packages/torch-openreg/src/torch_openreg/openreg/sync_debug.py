"""torch.cuda's sync debug mode: warn or raise on calls that make the host wait for the device."""

from __future__ import annotations

from .. import _C

_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Warn (1, "warn") or raise (2, "error") on calls that wait for the device (0, "default": no).

    Like torch.cuda's: ``.item()``, ``.cpu()`` and other blocking copies between
    host and device, operators whose result size or value depends on tensor data
    (``nonzero``, boolean indexing, ``masked_select``, ``unique``, ``equal``, ...)
    and ``Stream.synchronize()``; not ``torch.openreg.synchronize()`` nor event
    synchronization. The warning points at the calling line.
    """
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError(
                f"invalid value of debug_mode {debug_mode!r}, expected one of `default`, "
                "`warn`, `error`"
            )
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    if isinstance(debug_mode, bool) or not isinstance(debug_mode, int):
        raise RuntimeError(
            f"invalid debug_mode {debug_mode!r}: expected 0, 1, 2 or `default`, `warn`, `error`"
        )
    if debug_mode not in _SYNC_DEBUG_MODES.values():
        raise RuntimeError(f"invalid value of debug_mode {debug_mode}, expected one of 0,1,2")
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """The current sync debug mode: 0 (default), 1 (warn) or 2 (error)."""
    return _C._get_sync_debug_mode()


__all__ = ["get_sync_debug_mode", "set_sync_debug_mode"]
