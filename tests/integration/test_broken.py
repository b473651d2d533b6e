"""Install shape ``broken``: the autoload shim installed, the binding unloadable.

The nox session deletes the runtime's ``libopenreg.so`` from the installed tree
(the environment is throwaway). ``import torch`` must still work and warn once;
``OPENREG_AUTOLOAD_STRICT=1`` turns the failure into an error.
"""

from __future__ import annotations

from conftest import Python

SHAPE = "broken"

RECORD_IMPORT = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
try:
    torch.ones(1, device="openreg")
    device_error = None
except RuntimeError as exc:
    device_error = str(exc)
print(json.dumps({
    "warnings": [
        {"category": w.category.__name__,
         "runtime_warning": issubclass(w.category, RuntimeWarning),
         "message": str(w.message)}
        for w in caught
    ],
    "cpu_sum": torch.ones(3).sum().item(),
    "device_error": device_error,
}))
"""


def test_import_torch_succeeds_with_one_warning(python: Python) -> None:
    found = python.ok(RECORD_IMPORT).json()
    assert found["cpu_sum"] == 3.0
    assert "device type at start of device string: openreg" in (found["device_error"] or "")
    ours = [w for w in found["warnings"] if "openreg" in w["message"].lower()]
    assert len(ours) == 1, f"expected exactly one openreg warning, got {found['warnings']}"
    warning = ours[0]
    assert warning["category"] == "OpenRegAutoloadWarning" and warning["runtime_warning"], warning
    message = warning["message"]
    assert "libopenreg.so" in message, message  # the cause: the missing library
    assert "reinstall" in message and "OPENREG_AUTOLOAD=0" in message, message  # the remedies


def test_warning_is_printed_once_with_default_filters(python: Python) -> None:
    result = python.ok("import torch; import torch; print(torch.ones(2).sum().item())")
    assert result.last_line == "2.0"
    assert result.stderr.count("OpenRegAutoloadWarning") == 1, result.stderr
    assert "libopenreg.so" in result.stderr


def test_strict_mode_makes_import_torch_fail_with_the_cause(python: Python) -> None:
    result = python.fails("import torch", {"OPENREG_AUTOLOAD_STRICT": "1"})
    assert "Failed to load the backend extension: openreg" in result.stderr, result.stderr
    assert "OpenRegAutoloadError" in result.stderr and "libopenreg.so" in result.stderr

    caught = python.ok(
        """
        import json
        try:
            import torch
        except RuntimeError as exc:
            print(json.dumps({"error": str(exc), "cause": type(exc.__cause__).__name__,
                              "cause_message": str(exc.__cause__)}))
        """,
        {"OPENREG_AUTOLOAD_STRICT": "1"},
    ).json()
    assert caught["error"].startswith("Failed to load the backend extension: openreg"), caught
    assert caught["cause"] == "OpenRegAutoloadError", caught
    assert "libopenreg.so" in caught["cause_message"], caught
    assert "OPENREG_AUTOLOAD=0" in caught["cause_message"], caught


def test_off_switch_silences_the_broken_backend(python: Python) -> None:
    result = python.ok("import torch; print(torch.ones(2).sum().item())", {"OPENREG_AUTOLOAD": "0"})
    assert result.last_line == "2.0"
    assert "openreg" not in result.stderr.lower(), result.stderr


def test_explicit_import_reports_the_missing_library(python: Python) -> None:
    result = python.fails("import torch_openreg", {"OPENREG_AUTOLOAD": "0"})
    assert "ImportError" in result.stderr and "libopenreg.so" in result.stderr, result.stderr
