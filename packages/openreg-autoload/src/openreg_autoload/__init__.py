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
* ``OPENREG_AUTOLOAD=0`` (also ``false``/``no``/``off``): only openreg is skipped.
* ``OPENREG_AUTOLOAD_STRICT=1`` (also ``true``/``yes``/``on``): a failure raises
  :class:`OpenRegAutoloadError`, which torch reports as
  ``RuntimeError: Failed to load the backend extension: openreg`` caused by it.
"""

from __future__ import annotations

import os
import warnings

__all__ = [
    "OpenRegAutoloadError",
    "OpenRegAutoloadWarning",
    "autoload",
    "is_enabled",
    "is_strict",
]
__version__ = "0.1.0"

_OFF = frozenset({"0", "false", "no", "off"})
_ON = frozenset({"1", "true", "yes", "on"})

_REMEDY = (
    "reinstall or rebuild torch-openreg and openreg-runtime "
    "(pip install --force-reinstall torch-openreg openreg-runtime; in the OpenReg workspace: "
    "uv sync --reinstall-package openreg-runtime --reinstall-package torch-openreg)"
)


class OpenRegAutoloadWarning(RuntimeWarning):
    """``import torch`` went on without the openreg device because it failed to load.

    A dedicated subclass so that users and tests can filter exactly this warning
    (``-W error::openreg_autoload.OpenRegAutoloadWarning`` needs the module
    importable, ``-W error::RuntimeWarning`` does not).
    """


class OpenRegAutoloadError(RuntimeError):
    """The openreg device failed to load and ``OPENREG_AUTOLOAD_STRICT=1`` is set."""


def _flag(name: str, default: str, values: frozenset[str]) -> bool:
    return os.environ.get(name, default).strip().lower() in values


def is_enabled() -> bool:
    """False when ``OPENREG_AUTOLOAD`` is ``0``/``false``/``no``/``off``; unset means on."""
    return not _flag("OPENREG_AUTOLOAD", "1", _OFF)


def is_strict() -> bool:
    """True when ``OPENREG_AUTOLOAD_STRICT`` is ``1``/``true``/``yes``/``on``; unset means off."""
    return _flag("OPENREG_AUTOLOAD_STRICT", "0", _ON)


def _describe(error: BaseException, *, strict: bool) -> str:
    cause = f"{type(error).__name__}: {error}"
    if strict:
        return (
            f"openreg-autoload: torch_openreg failed to load ({cause}). "
            f"To fix it, {_REMEDY}; or turn openreg autoload off with OPENREG_AUTOLOAD=0 "
            "(this error instead of a warning because OPENREG_AUTOLOAD_STRICT=1)."
        )
    return (
        f"openreg-autoload: torch_openreg failed to load, so `import torch` continues without "
        f"the 'openreg' device ({cause}). To fix it, {_REMEDY}; to stop loading it, set "
        "OPENREG_AUTOLOAD=0 or uninstall openreg-autoload. Set OPENREG_AUTOLOAD_STRICT=1 to "
        "make this an error."
    )


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
    if not is_enabled():
        return
    try:
        import torch_openreg

        torch_openreg._autoload()
    except Exception as error:
        strict = is_strict()
        message = _describe(error, strict=strict)
        if strict:
            raise OpenRegAutoloadError(message) from error
        # stacklevel=2: attribute the warning to torch's import, where it happens.
        warnings.warn(message, OpenRegAutoloadWarning, stacklevel=2)
