"""openreg_autoload: register the OpenReg ``openreg`` device during ``import torch``.

Near the end of ``import torch``, torch loads every entry point of the
``torch.backends`` group and calls it. This distribution's only job is to own
that entry point (named ``openreg``, target :func:`autoload`); all device logic
stays in ``torch_openreg``. Why a separate, tiny module instead of an entry point
on ``torch_openreg`` itself (see docs/autoload.md for the full design):

* Loading the entry point happens *inside* torch's own import. This module
  imports nothing but the standard library at module level, so loading it can
  never re-enter a half-initialised ``torch`` or ``torch_openreg``.
* ``pip install torch-openreg`` alone leaves ``import torch`` untouched; only
  installing this shim opts an environment into autoload.
* It decides policy that torch's loader cannot: a broken backend must not break
  every ``import torch`` in the environment, so failures become one warning
  (or, with ``OPENREG_AUTOLOAD_STRICT=1``, an error for CI).

Environment switches, read at call time so child processes (multiprocessing
spawn, DataLoader workers) inherit them with the rest of the environment:

* ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (torch's): no backend is autoloaded at all.
* ``OPENREG_AUTOLOAD=0``: only openreg is skipped (``1`` or unset: loaded).
* ``OPENREG_AUTOLOAD_STRICT=1``: a failure raises :class:`OpenRegAutoloadError`,
  which torch reports as ``RuntimeError: Failed to load the backend extension:
  openreg`` caused by it (``0`` or unset: a warning). Strict mode also checks the
  device variables (``OPENREG_DEVICE_COUNT``, ``OPENREG_DEVICE_MEMORY``,
  ``OPENREG_FAULT_*``) at once; otherwise they are checked at the first use of a
  device (``is_available()`` warns and answers False for an invalid one).

Like every other OpenReg variable, the two switches are validated: only ``0``
and ``1`` are accepted (surrounding spaces ignored, empty means unset). Any
other value is reported like a load failure (one warning, or the error in
strict mode); an invalid ``OPENREG_AUTOLOAD`` also leaves openreg unloaded,
since what it asked for is unknown, and an invalid ``OPENREG_AUTOLOAD_STRICT``
counts as ``0``.

The remedy a failure names depends on its cause: an OpenReg variable with an
invalid value (the message of such errors starts ``NAME='value' is invalid``)
is fixed by correcting or unsetting that variable, anything else by
reinstalling or rebuilding the packages.
"""

from __future__ import annotations

import os
import re
import warnings

__all__ = [
    "OpenRegAutoloadError",
    "OpenRegAutoloadWarning",
    "autoload",
    "is_enabled",
    "is_strict",
]
__version__ = "0.1.0"

_REINSTALL = (
    "reinstall or rebuild torch-openreg and openreg-runtime "
    "(pip install --force-reinstall torch-openreg openreg-runtime; in the OpenReg workspace: "
    "uv sync --reinstall-package openreg-runtime --reinstall-package torch-openreg)"
)
# How OpenReg's messages about an invalid environment variable begin.
_INVALID_VARIABLE = re.compile(r"\b(OPENREG_[A-Z0-9_]+)='[^']*' is invalid")


class OpenRegAutoloadWarning(RuntimeWarning):
    """``import torch`` went on without the openreg device because it failed to load.

    A dedicated subclass so that users and tests can filter exactly this warning
    (``-W error::openreg_autoload.OpenRegAutoloadWarning`` needs the module
    importable, ``-W error::RuntimeWarning`` does not).
    """


class OpenRegAutoloadError(RuntimeError):
    """The openreg device failed to load and ``OPENREG_AUTOLOAD_STRICT=1`` is set."""


def _switch(name: str) -> bool | None:
    """``OPENREG_AUTOLOAD``-style switch: True for 1, False for 0, its default when
    unset or empty, None when the value is anything else."""
    value = os.environ.get(name, "").strip()
    if value == "":
        return name == "OPENREG_AUTOLOAD"  # autoload defaults on, strict mode off
    return {"0": False, "1": True}.get(value)


def _invalid_switch(name: str) -> str:
    return (
        f"{name}={os.environ.get(name, '')!r} is invalid: set it to 1 or 0 "
        "(unset: autoload on, strict mode off)"
    )


def is_enabled() -> bool:
    """True when ``OPENREG_AUTOLOAD`` is ``1`` or unset; False for ``0`` or an invalid value."""
    return bool(_switch("OPENREG_AUTOLOAD"))


def is_strict() -> bool:
    """True when ``OPENREG_AUTOLOAD_STRICT`` is ``1``; False when ``0``, unset or invalid."""
    return bool(_switch("OPENREG_AUTOLOAD_STRICT"))


def _remedy(error: BaseException) -> str:
    """What fixes ``error``: the variable it names as invalid, else a reinstall."""
    cause: BaseException | None = error
    while cause is not None:
        found = _INVALID_VARIABLE.search(str(cause))
        if found:
            return f"set {found.group(1)} to a valid value (the message says which) or unset it"
        cause = cause.__cause__ or cause.__context__
    return _REINSTALL


def _describe(error: BaseException, *, strict: bool) -> str:
    cause = f"{type(error).__name__}: {error}"
    remedy = _remedy(error)
    if strict:
        return (
            f"openreg-autoload: torch_openreg failed to load ({cause}). "
            f"To fix it, {remedy}; or turn openreg autoload off with OPENREG_AUTOLOAD=0 "
            "(this error instead of a warning because OPENREG_AUTOLOAD_STRICT=1)."
        )
    return (
        f"openreg-autoload: torch_openreg failed to load, so `import torch` continues without "
        f"the 'openreg' device ({cause}). To fix it, {remedy}; to stop loading it, set "
        "OPENREG_AUTOLOAD=0 or uninstall openreg-autoload. Set OPENREG_AUTOLOAD_STRICT=1 to "
        "make this an error."
    )


def _report(
    message: str, *, strict: bool, cause: BaseException | None = None, stacklevel: int = 3
) -> None:
    if strict:
        raise OpenRegAutoloadError(message) from cause
    # The default stacklevel attributes the warning to torch's import (the caller of
    # autoload), where it happens.
    warnings.warn(message, OpenRegAutoloadWarning, stacklevel=stacklevel)


def _check_switches() -> bool:
    """Report invalid switch values; True if openreg may be loaded."""
    strict = _switch("OPENREG_AUTOLOAD_STRICT")
    if strict is None:
        _report(
            f"openreg-autoload: {_invalid_switch('OPENREG_AUTOLOAD_STRICT')}; "
            "failures to load openreg are warnings until it is fixed.",
            strict=False,
            stacklevel=4,
        )
    enabled = _switch("OPENREG_AUTOLOAD")
    if enabled is None:
        _report(
            f"openreg-autoload: {_invalid_switch('OPENREG_AUTOLOAD')}, so `import torch` "
            "continues without the 'openreg' device. Set OPENREG_AUTOLOAD=1 to load it or "
            "OPENREG_AUTOLOAD=0 to skip it.",
            strict=bool(strict),
            stacklevel=4,
        )
    return bool(enabled)


def autoload() -> None:
    """The ``torch.backends`` entry point: import ``torch_openreg`` and make sure it registered.

    Called by torch with no arguments while ``torch`` itself is still importing.
    ``torch_openreg._autoload`` is defined before ``torch_openreg`` imports torch,
    so when the user imported ``torch_openreg`` first (and torch's import is
    nested inside it) this finds the half-initialised package in ``sys.modules``
    and the call returns at once; the outer import finishes the registration.

    Any exception (ImportError for a missing library or a torch version mismatch,
    OSError, RuntimeError from the C++ extension, ...) is caught on purpose: an
    exception escaping an entry point makes ``import torch`` itself fail, which
    would break every torch program in the environment, not only openreg users.
    """
    if not _check_switches():
        return
    try:
        import torch_openreg

        # Strict: the device variables (read by the runtime at the first device use)
        # are checked now too, so that CI fails at `import torch`.
        torch_openreg._autoload(check_environment=is_strict())
    except Exception as error:
        strict = is_strict()
        _report(_describe(error, strict=strict), strict=strict, cause=error)
