"""Install shape ``manual``: torch + torch-openreg wheels, without the autoload shim.

``import torch`` does not touch OpenReg; ``import torch_openreg`` registers the
device.
"""

from __future__ import annotations

from conftest import Python

SHAPE = "manual"

UNKNOWN_DEVICE = "device type at start of device string: openreg"


def test_import_torch_alone_does_not_register_openreg(python: Python) -> None:
    result = python.ok(
        """
        import json, sys
        import torch

        try:
            torch.ones(1, device="openreg")
            error = None
        except RuntimeError as exc:
            error = str(exc)
        print(json.dumps({"imported": "torch_openreg" in sys.modules, "error": error}))
        """
    )
    found = result.json()
    assert found["imported"] is False, "import torch must not import torch_openreg without the shim"
    assert found["error"] is not None, "device='openreg' must fail before import torch_openreg"
    assert UNKNOWN_DEVICE in found["error"], found["error"]


def test_import_torch_openreg_registers_the_device(python: Python) -> None:
    result = python.ok(
        """
        import json
        import torch
        import torch_openreg

        t = torch.ones(4, device="openreg") * 3
        print(json.dumps({
            "device": str(t.device),
            "sum": t.sum().item(),
            "count": torch.openreg.device_count(),
            "name": torch._C._get_privateuse1_backend_name(),
        }))
        """
    )
    assert result.json() == {"device": "openreg:0", "sum": 12.0, "count": 2, "name": "openreg"}


def test_import_torch_openreg_first(python: Python) -> None:
    result = python.ok(
        """
        import torch_openreg
        import torch

        print(torch.arange(3, device="openreg").sum().item())
        """
    )
    assert result.last_line == "3"


def test_no_openreg_backend_entry_point(python: Python) -> None:
    result = python.ok(
        """
        import json
        from importlib.metadata import entry_points

        group = entry_points(group="torch.backends")
        print(json.dumps(sorted(f"{ep.name}={ep.value}" for ep in group)))
        """
    )
    names = [entry.split("=", 1)[0] for entry in result.json()]  # type: ignore[union-attr]
    assert "openreg" not in names, f"torch.backends entry points: {result.json()}"
