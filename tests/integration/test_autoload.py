"""Install shape ``autoload``: torch + torch-openreg + openreg-autoload wheels.

``import torch`` alone registers the ``openreg`` device; both off-switches work
and are inherited by child processes; every import order works. (The nox
session then uninstalls the shim and checks that autoload is gone.)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import pytest
from conftest import Python

SHAPE = "autoload"

UNKNOWN_DEVICE = "device type at start of device string: openreg"

# Prints whether openreg is usable in this process, as one JSON line.
STATUS = """
import json, sys
def _status():
    import torch
    status = {"imported": "torch_openreg" in sys.modules}
    try:
        status["sum"] = torch.tensor([1, 2, 3], device="openreg").sum().item()
        status["count"] = torch.openreg.device_count()
    except Exception as exc:
        status["error"] = f"{type(exc).__name__}: {exc}"
    return status
print(json.dumps(_status()))
"""

# Imported by spawned children (by name, through PYTHONPATH): only `import torch`.
PROBE_MODULE = '''
"""What a spawned child sees; imports torch only (never torch_openreg)."""
import os
import sys

import torch
import torch.utils.data


def status(_: object = None) -> dict:
    info = {"pid": os.getpid(), "imported": "torch_openreg" in sys.modules}
    try:
        info["sum"] = torch.tensor([1, 2, 3], device="openreg").sum().item()
        info["count"] = torch.openreg.device_count()
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


class Probe(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> dict:
        info = status()
        info["worker"] = torch.utils.data.get_worker_info().id
        return info
'''

SPAWN_CHILD = """
import json, multiprocessing as mp
import torch
parent = "openreg" if hasattr(torch, "openreg") else "none"
if parent == "openreg":
    torch.ones(2, device="openreg")  # the parent has used the device before spawning
import probe
with mp.get_context("spawn").Pool(1) as pool:
    child = pool.apply(probe.status)
print(json.dumps({"parent": parent, "child": child}))
"""

DATALOADER_WORKERS = """
import json
import torch
from torch.utils.data import DataLoader
import probe
loader = DataLoader(probe.Probe(), batch_size=None, num_workers=2,
                    multiprocessing_context="spawn")
print(json.dumps([dict(item) for item in loader]))
"""

OFF_SWITCHES = [
    pytest.param({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, id="TORCH_DEVICE_BACKEND_AUTOLOAD=0"),
    pytest.param({"OPENREG_AUTOLOAD": "0"}, id="OPENREG_AUTOLOAD=0"),
    pytest.param({"OPENREG_AUTOLOAD": " 0 "}, id="OPENREG_AUTOLOAD=' 0 '"),
]


@pytest.fixture(scope="module")
def probe_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("probe")
    (directory / "probe.py").write_text(PROBE_MODULE)
    return str(directory)


def test_entry_point_is_installed(python: Python) -> None:
    result = python.ok(
        """
        import json
        from importlib.metadata import entry_points
        print(json.dumps({ep.name: ep.value for ep in entry_points(group="torch.backends")}))
        """
    )
    assert result.json() == {"openreg": "openreg_autoload:autoload"}


def test_shim_module_does_not_import_torch(python: Python) -> None:
    result = python.ok("import sys, openreg_autoload; print(sorted(m for m in sys.modules "
                       "if m.split('.')[0] in ('torch', 'torch_openreg')))")  # fmt: skip
    assert result.last_line == "[]"


def test_import_torch_alone_registers_openreg(python: Python) -> None:
    result = python.ok(
        """
        import json, sys, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
        t = torch.tensor([1, 2, 3], device="openreg")
        print(json.dumps({
            "imported": "torch_openreg" in sys.modules,
            "device": str(t.device),
            "sum": t.sum().item(),
            "count": torch.openreg.device_count(),
            "warnings": [str(w.message) for w in caught if "openreg" in str(w.message).lower()],
        }))
        """
    )
    assert result.json() == {
        "imported": True,
        "device": "openreg:0",
        "sum": 6,
        "count": 2,
        "warnings": [],
    }
    assert "openreg" not in result.stderr.lower(), result.stderr


def test_compile_workers_see_the_device(python: Python) -> None:
    """Inductor's subprocess compile pool (fresh interpreters that import torch)
    autoloads openreg too, and Dynamo's device registry there knows it."""
    result = python.ok(
        """
        import json
        import torch
        from torch._inductor import config
        from torch._inductor.async_compile import AsyncCompile
        from torch._dynamo.device_interface import get_interface_for_device
        config.compile_threads = 2
        config.worker_start_method = "subprocess"
        pool = AsyncCompile.process_pool()
        interface = pool.submit(get_interface_for_device, "openreg").result(timeout=240)
        name = pool.submit(torch._C._get_privateuse1_backend_name).result(timeout=240)
        print(json.dumps({"interface": interface.__name__, "backend": name}))
        """
    )
    assert result.json() == {"interface": "OpenRegInterface", "backend": "openreg"}


@pytest.mark.parametrize("env", OFF_SWITCHES)
def test_off_switch(python: Python, env: dict[str, str]) -> None:
    status = python.ok(STATUS, env).json()
    assert status["imported"] is False, f"{env} must keep torch_openreg unimported"
    assert UNKNOWN_DEVICE in status.get("error", ""), status
    # The manual way still works with autoload off.
    manual = python.ok(
        "import torch, torch_openreg; print(torch.ones(2, device='openreg').sum().item())", env
    )
    assert manual.last_line == "2.0"


@pytest.mark.parametrize(
    "imports",
    [
        "import torch",
        "import torch_openreg",
        "import torch; import torch_openreg",
        "import torch_openreg; import torch",
        "import torch_openreg; import torch; import torch_openreg",
        "import openreg_autoload; import torch",
        "import torch_openreg.openreg; import torch",
    ],
)
def test_import_orders(python: Python, imports: str) -> None:
    result = python.ok(
        f"""
        {imports}
        import json, sys, torch, torch_openreg, openreg_autoload
        torch_openreg._autoload()  # idempotent no-ops once imported
        openreg_autoload.autoload()
        t = torch.tensor([1, 2, 3], device="openreg")
        name = torch._C._get_privateuse1_backend_name()
        print(json.dumps({{"sum": t.sum().item(), "name": name}}))
        """
    )
    assert result.json() == {"sum": 6, "name": "openreg"}
    assert "OpenRegAutoloadWarning" not in result.stderr, result.stderr


def test_spawned_child_sees_the_device(python: Python, probe_path: str) -> None:
    found = python.ok(SPAWN_CHILD, {"PYTHONPATH": probe_path}).json()
    assert found["parent"] == "openreg"
    child = found["child"]
    assert child == {"pid": child["pid"], "imported": True, "sum": 6, "count": 2}, child


def test_dataloader_workers_see_the_device(python: Python, probe_path: str) -> None:
    items = python.ok(DATALOADER_WORKERS, {"PYTHONPATH": probe_path}).json()
    assert len(items) == 6
    assert {item["worker"] for item in items} == {0, 1}, items
    for item in items:
        assert (item["imported"], item.get("sum"), item.get("count")) == (True, 6, 2), item


@pytest.mark.parametrize("env", OFF_SWITCHES[:2])
def test_spawned_child_inherits_off_switch(
    python: Python, probe_path: str, env: dict[str, str]
) -> None:
    found = python.ok(SPAWN_CHILD, {"PYTHONPATH": probe_path, **env}).json()
    assert found["parent"] == "none"
    assert found["child"]["imported"] is False, found
    assert UNKNOWN_DEVICE in found["child"].get("error", ""), found


@pytest.mark.parametrize("env", OFF_SWITCHES[:2])
def test_dataloader_workers_inherit_off_switch(
    python: Python, probe_path: str, env: dict[str, str]
) -> None:
    items = python.ok(DATALOADER_WORKERS, {"PYTHONPATH": probe_path, **env}).json()
    assert {item["worker"] for item in items} == {0, 1}, items
    for item in items:
        assert item["imported"] is False and UNKNOWN_DEVICE in item.get("error", ""), item


def test_import_time(python: Python, report: Callable[[str], None]) -> None:
    """Measures (does not assert) what autoload adds to ``import torch``.

    Expected: autoload costs what ``import torch_openreg`` costs, nothing more.
    """
    code = """
    import json, time
    t0 = time.perf_counter()
    import torch
    t1 = time.perf_counter()
    import torch_openreg
    t2 = time.perf_counter()
    print(json.dumps([t1 - t0, t2 - t1]))
    """
    rounds = 3
    samples: dict[str, list[list[float]]] = {"off": [], "on": []}
    python.ok(code)  # warm the page cache so the first sample is not an outlier
    for _ in range(rounds):  # interleaved, so load changes hit both variants alike
        samples["off"].append(python.ok(code, {"OPENREG_AUTOLOAD": "0"}).json())  # type: ignore[arg-type]
        samples["on"].append(python.ok(code).json())  # type: ignore[arg-type]
    shim = python.ok(
        "import time; t = time.perf_counter(); import openreg_autoload; "
        "print(time.perf_counter() - t)"
    )

    def stats(key: str, index: int) -> tuple[float, float]:
        values = [sample[index] for sample in samples[key]]
        return min(values), statistics.median(values)

    (torch_min, torch_med), (manual_min, manual_med) = stats("off", 0), stats("off", 1)
    (auto_min, auto_med), (_, after) = stats("on", 0), stats("on", 1)
    report(f"import times over {rounds} fresh interpreters per variant (seconds, min / median):")
    report(
        f"  OPENREG_AUTOLOAD=0: import torch {torch_min:.2f} / {torch_med:.2f}; "
        f"then import torch_openreg {manual_min:.3f} / {manual_med:.3f}"
    )
    report(
        f"  autoload:           import torch {auto_min:.2f} / {auto_med:.2f} (includes the binding)"
    )
    report(
        f"  autoload adds {auto_min - torch_min:+.2f} / {auto_med - torch_med:+.2f} s; "
        f"importing the shim module alone: {float(shim.last_line) * 1e3:.2f} ms"
    )
    assert after < auto_min, "with autoload, torch_openreg must already be imported by import torch"


# One JSON line: the openreg warnings `import torch` emitted, and whether openreg loaded.
WARNINGS_OF_IMPORT = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
print(json.dumps({
    "loaded": "torch_openreg" in sys.modules and hasattr(torch, "openreg"),
    "warnings": [{"category": w.category.__name__, "message": str(w.message)}
                 for w in caught if "openreg" in str(w.message).lower()],
}))
"""


@pytest.mark.parametrize("value", ["maybe", "2", "off", "true", "yes", "1.0"])
def test_invalid_autoload_switch_warns_and_skips_openreg(python: Python, value: str) -> None:
    found = python.ok(WARNINGS_OF_IMPORT, {"OPENREG_AUTOLOAD": value}).json()
    assert found["loaded"] is False, found
    (warning,) = found["warnings"]
    assert warning["category"] == "OpenRegAutoloadWarning", warning
    message = warning["message"]
    assert f"OPENREG_AUTOLOAD='{value}' is invalid: set it to 1 or 0" in message, message
    assert "reinstall" not in message, message


@pytest.mark.parametrize("value", ["1", " 1", ""])
def test_autoload_switch_on_values(python: Python, value: str) -> None:
    found = python.ok(WARNINGS_OF_IMPORT, {"OPENREG_AUTOLOAD": value}).json()
    assert found == {"loaded": True, "warnings": []}


def test_invalid_autoload_switch_is_an_error_in_strict_mode(python: Python) -> None:
    result = python.fails(
        "import torch", {"OPENREG_AUTOLOAD": "maybe", "OPENREG_AUTOLOAD_STRICT": "1"}
    )
    assert "Failed to load the backend extension: openreg" in result.stderr, result.stderr
    assert "OPENREG_AUTOLOAD='maybe' is invalid" in result.stderr, result.stderr


@pytest.mark.parametrize("value", ["yes", "true", "2"])
def test_invalid_strict_switch_warns_and_openreg_still_loads(python: Python, value: str) -> None:
    found = python.ok(WARNINGS_OF_IMPORT, {"OPENREG_AUTOLOAD_STRICT": value}).json()
    assert found["loaded"] is True, found
    (warning,) = found["warnings"]
    assert f"OPENREG_AUTOLOAD_STRICT='{value}' is invalid" in warning["message"], warning


def test_invalid_openreg_variable_warning_names_the_variable_as_remedy(python: Python) -> None:
    found = python.ok(WARNINGS_OF_IMPORT, {"OPENREG_FALLBACK": "bogus"}).json()
    assert found["loaded"] is False, found
    (warning,) = found["warnings"]
    message = warning["message"]
    assert "OPENREG_FALLBACK='bogus' is invalid" in message, message  # the cause
    assert "To fix it, set OPENREG_FALLBACK to a valid value" in message, message  # its remedy
    assert "reinstall" not in message, message


# The device variables are read by the runtime when the devices are first asked for; strict
# mode checks them at `import torch` too (with the binding's own minimum device memory).
INVALID_DEVICE_VARIABLES = [
    ("OPENREG_DEVICE_COUNT", "17"),
    ("OPENREG_DEVICE_COUNT", "two"),
    ("OPENREG_DEVICE_MEMORY", "lots"),
    ("OPENREG_DEVICE_MEMORY", "1MiB"),  # the runtime accepts it; the binding's allocator cannot
    ("OPENREG_FAULT_MEMCPY", "first"),
]


@pytest.mark.parametrize(("variable", "value"), INVALID_DEVICE_VARIABLES)
def test_invalid_device_variable_is_an_error_in_strict_mode(
    python: Python, variable: str, value: str
) -> None:
    result = python.fails("import torch", {variable: value, "OPENREG_AUTOLOAD_STRICT": "1"})
    assert "Failed to load the backend extension: openreg" in result.stderr, result.stderr
    assert f"{variable}='{value}' is invalid" in result.stderr, result.stderr
    assert f"To fix it, set {variable} to a valid value" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("variable", "value"), [INVALID_DEVICE_VARIABLES[0], INVALID_DEVICE_VARIABLES[3]]
)
def test_invalid_device_variable_is_an_error_in_strict_mode_whatever_is_imported_first(
    python: Python, variable: str, value: str
) -> None:
    # torch_openreg first: torch's autoload runs while torch_openreg is still importing,
    # and the check happens once its import is done.
    result = python.fails("import torch_openreg", {variable: value, "OPENREG_AUTOLOAD_STRICT": "1"})
    assert f"{variable}='{value}' is invalid" in result.stderr, result.stderr


@pytest.mark.parametrize(("variable", "value"), INVALID_DEVICE_VARIABLES)
def test_invalid_device_variable_leaves_import_alone_and_warns_when_asked(
    python: Python, variable: str, value: str
) -> None:
    code = WARNINGS_OF_IMPORT.replace(
        "    import torch\n", "    import torch\n    available = torch.openreg.is_available()\n"
    ).replace('"loaded":', '"available": available, "loaded":')
    found = python.ok(code, {variable: value}).json()
    assert found["loaded"] is True and found["available"] is False, found
    (warning,) = found["warnings"]  # from is_available(), not from the import
    assert warning["category"] == "UserWarning", warning
    assert f"{variable}='{value}' is invalid" in warning["message"], warning
