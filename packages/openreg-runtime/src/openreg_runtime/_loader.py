"""Where the runtime's header and shared library live, and how to load it.

Dependent extensions (such as torch-openreg's ``_C``) link against
``libopenreg.so`` by soname. Calling :func:`load_library` before importing
such an extension makes the already-loaded library satisfy that dependency,
so no absolute path or ``LD_LIBRARY_PATH`` is ever needed.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
LIBRARY_FILE = "libopenreg.so"


def get_include() -> str:
    """Directory containing ``openreg.h`` (pass to the compiler with ``-I``)."""
    return str(_PACKAGE_DIR / "include")


def get_library_dir() -> str:
    """Directory containing ``libopenreg.so`` (pass to the linker with ``-L``)."""
    return str(_PACKAGE_DIR / "lib")


def library_path() -> str:
    """Full path of ``libopenreg.so``."""
    return str(_PACKAGE_DIR / "lib" / LIBRARY_FILE)


@functools.cache
def load_library() -> ctypes.CDLL:
    """Load ``libopenreg.so`` globally (idempotent) and return its handle.

    Raises ImportError naming the missing file if the installation is broken.
    """
    path = Path(library_path())
    if not path.is_file():
        raise ImportError(
            f"the OpenReg runtime library is missing: {path} does not exist; "
            "reinstall openreg-runtime (pip install --force-reinstall openreg-runtime)"
        )
    try:
        return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except OSError as error:
        raise ImportError(
            f"cannot load the OpenReg runtime library {path}: {error}; reinstall openreg-runtime"
        ) from error
