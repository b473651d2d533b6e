"""torch.compile support for openreg: a Dynamo device interface and an Inductor backend.

Importing torch._dynamo or torch._inductor costs far more than the whole binding
(seconds against milliseconds), so nothing here imports them. ``install()`` only
arranges for registration to happen when PyTorch itself loads them:

* Dynamo has no hook for out-of-tree devices, and its stream/event handling
  snapshots the registered device interfaces on first use. So a one-shot import
  hook waits for the ``torch._dynamo`` package to finish importing (or registers
  at once if it already has) and then registers ``OpenRegInterface``
  (``dynamo.py``).
* Inductor asks the PrivateUse1 device module for ``_inductor_backend_init``
  the first time it lowers a graph for that device; ``torch.openreg`` provides it
  and it calls ``register_inductor_backend`` (``inductor.py``).

Design and measurements: docs/compile.md.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType

_DYNAMO = "torch._dynamo"
_lock = threading.Lock()
_installed = False


def register_dynamo_interface() -> None:
    """Register openreg's device interface with Dynamo (imports torch._dynamo)."""
    from .dynamo import register

    register()


def _register_dynamo_interface_or_warn() -> None:
    # Runs at the end of `import torch._dynamo`: a failure here must not break
    # Dynamo for every other device.
    try:
        register_dynamo_interface()
    except Exception as error:
        warnings.warn(
            f"torch_openreg could not register the openreg device with Dynamo ({error}); "
            "torch.compile will not trace openreg streams and events. Reinstall or rebuild "
            "torch_openreg for this torch version.",
            RuntimeWarning,
            stacklevel=2,
        )


def register_inductor_backend() -> None:
    """Register openreg's scheduling, wrapper codegen and op overrides with Inductor."""
    from .inductor import register

    register()


class _RunAfterLoader(importlib.abc.Loader):
    """Wraps a module's loader to run ``callback`` once the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The module keeps its own loader (inspect, pkgutil and reload use it).
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        self._callback()


class _AfterImportHook(importlib.abc.MetaPathFinder):
    """Runs ``callback`` once, after module ``name`` is first imported.

    Stays in ``sys.meta_path`` until the module has actually executed: a mere
    ``importlib.util.find_spec(name)`` (an availability check) must not use it up.
    """

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self._name = name
        self._callback = callback
        self._searching = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name or self._searching:
            return None
        self._searching = True  # the search below consults sys.meta_path again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        if spec is not None and spec.loader is not None:
            spec.loader = _RunAfterLoader(spec.loader, self._imported)
        return spec

    def _imported(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        self._callback()


def install() -> None:
    """Arrange for Dynamo registration when torch._dynamo loads (idempotent, cheap)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        if _DYNAMO not in sys.modules:
            sys.meta_path.insert(0, _AfterImportHook(_DYNAMO, _register_dynamo_interface_or_warn))
            return
    # Already imported (torch_openreg loaded after torch._dynamo): register now.
    register_dynamo_interface()


__all__ = ["install", "register_dynamo_interface", "register_inductor_backend"]
