"""The binding refuses to load under a torch other than the one it was built for.

A C++ extension compiled against one torch minor release can import under
another and fail later in unpredictable ways; ``torch_openreg._compat`` turns
the mismatch into one ImportError naming both versions and the rebuild
command. The checks run in fresh interpreters with backend autoload off, so
that ``import torch`` does not load the binding before the test patches it.
"""

from __future__ import annotations

import pytest
import torch

import torch_openreg
from torch_openreg import _build_info


def major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def test_build_info_records_the_running_torch():
    assert _build_info.TORCH_VERSION == torch.__version__
    assert torch_openreg._C is not None


@pytest.mark.child_interpreters
def test_other_torch_minor_release_is_refused_with_the_remedy(run_python):
    result = run_python(
        """
        import torch
        torch.__version__ = "2.13.1"
        try:
            import torch_openreg
        except ImportError as error:
            print("refused:", error)
        else:
            print("imported")
        """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr
    message = result.stdout
    assert message.startswith("refused:"), message
    assert f"compiled against torch {_build_info.TORCH_VERSION}" in message
    assert "torch 2.13.1 is installed" in message
    assert "uv sync --reinstall-package torch-openreg" in message
    # The extension was never loaded: nothing half-registered is left behind.
    assert "openreg" not in result.stderr


@pytest.mark.child_interpreters
def test_same_minor_release_with_another_patch_loads(run_python):
    result = run_python(
        f"""
        import torch
        torch.__version__ = "{major_minor(_build_info.TORCH_VERSION)}.99"
        import torch_openreg
        print(torch.ones(2, device="openreg").sum().item())
        """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2.0"
