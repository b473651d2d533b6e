"""Refuse to load ``_C`` under a torch other than the one it was compiled for.

A C++ extension compiled against one torch minor release can import under
another and then fail in unpredictable ways (undefined symbols at best, silent
ABI mismatches at worst). The build records its torch version in
``_build_info.py``; this check turns a mismatch into one clear ImportError.
"""

from __future__ import annotations

import torch


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def check_torch_version() -> None:
    try:
        from ._build_info import TORCH_VERSION
    except ImportError as error:
        raise ImportError(
            "torch_openreg is not built: its _build_info.py is missing. Reinstall it "
            "(pip install --force-reinstall --no-binary torch-openreg torch-openreg, or uv sync)."
        ) from error
    built, running = _major_minor(TORCH_VERSION), _major_minor(torch.__version__)
    if built != running:
        raise ImportError(
            f"torch_openreg was compiled against torch {TORCH_VERSION} but torch "
            f"{torch.__version__} is installed; the C++ extension only works with torch "
            f"{built}.x. Rebuild it against the installed torch "
            "(pip install --force-reinstall --no-binary torch-openreg --no-build-isolation "
            "torch-openreg, or `uv sync --reinstall-package torch-openreg`) "
            f"or install torch {built}."
        )
