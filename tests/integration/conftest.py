"""Shared helpers for the install-shape integration tests.

Each ``test_<shape>.py`` runs in its own nox environment, built from the wheels in
``dist/`` (``uv run nox -s "integration(<shape>)"``). Every check starts a fresh
interpreter (``subprocess.run([sys.executable, "-c", code])``): autoload happens
at ``import torch`` and registration is process-global, so only a new process
shows what a user would see, and nothing leaks between checks.

Nothing is skipped: each module declares the shape it needs and an autouse
fixture *fails* every test of the module if the environment does not match
(wrong packages installed, packages imported from the source tree, ...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

# Variables that change what `import torch` does; removed from every child's
# environment unless a test sets them explicitly.
CONTROL_VARIABLES = (
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "OPENREG_AUTOLOAD",
    "OPENREG_AUTOLOAD_STRICT",
    "PYTHONWARNINGS",
    "PYTHONPATH",
)
# Deterministic devices for every child process.
DEVICE_ENVIRONMENT = {"OPENREG_DEVICE_COUNT": "2", "OPENREG_DEVICE_MEMORY": "1GiB"}

# What each shape must (True) and must not (False) have installed.
SHAPES: dict[str, dict[str, bool]] = {
    "runtime-only": {
        "torch": False,
        "openreg-runtime": True,
        "torch-openreg": False,
        "openreg-autoload": False,
    },
    "manual": {
        "torch": True,
        "openreg-runtime": True,
        "torch-openreg": True,
        "openreg-autoload": False,
    },
    "autoload": {
        "torch": True,
        "openreg-runtime": True,
        "torch-openreg": True,
        "openreg-autoload": True,
    },
    "broken": {
        "torch": True,
        "openreg-runtime": True,
        "torch-openreg": True,
        "openreg-autoload": True,
    },
}

# Runs in the environment under test without importing any OpenReg module (an
# import could trigger what is being tested): which distributions are installed,
# where their files are, and whether the runtime library is present.
_SURVEY = """
import importlib.metadata as md, importlib.util, json, pathlib, sysconfig
dists = {}
for name in ("torch", "openreg-runtime", "torch-openreg", "openreg-autoload"):
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        dists[name] = None
        continue
    direct = dist.read_text("direct_url.json")
    editable = bool(direct and json.loads(direct).get("dir_info", {}).get("editable"))
    dists[name] = {"version": dist.version, "editable": editable}
spec = importlib.util.find_spec("openreg_runtime")
lib = None
if spec is not None and spec.origin:
    lib = str(pathlib.Path(spec.origin).parent / "lib" / "libopenreg.so")
site = {str(pathlib.Path(sysconfig.get_paths()[k]).resolve()) for k in ("purelib", "platlib")}
origins = {}
for module in ("torch", "openreg_runtime", "torch_openreg", "openreg_autoload"):
    found = importlib.util.find_spec(module)
    origins[module] = str(pathlib.Path(found.origin).resolve()) if found and found.origin else None
print(json.dumps({
    "dists": dists,
    "library": lib,
    "library_exists": bool(lib and pathlib.Path(lib).is_file()),
    "site_packages": sorted(site),
    "origins": origins,
}))
"""


@dataclass(frozen=True)
class Result:
    """Outcome of one child interpreter."""

    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"exit code {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )

    @property
    def last_line(self) -> str:
        lines = self.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    def json(self) -> object:
        """The last stdout line parsed as JSON (children print their findings that way)."""
        return json.loads(self.last_line)


class Python:
    """Runs snippets in fresh interpreters of the environment under test."""

    def __init__(self, workdir: Path) -> None:
        # Not the repository root: '' on sys.path must not expose source trees.
        self.workdir = workdir

    def environment(self, overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """This process's environment without the autoload switches, plus ``overrides``."""
        env = {k: v for k, v in os.environ.items() if k not in CONTROL_VARIABLES}
        env.update(DEVICE_ENVIRONMENT)
        for key, value in (overrides or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(
        self,
        code: str,
        env: Mapping[str, str | None] | None = None,
        timeout: float = 300,
        args: tuple[str, ...] = (),
    ) -> Result:
        completed = subprocess.run(
            [sys.executable, *args, "-c", textwrap.dedent(code)],
            cwd=self.workdir,
            env=self.environment(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(completed.returncode, completed.stdout, completed.stderr)

    def ok(
        self, code: str, env: Mapping[str, str | None] | None = None, timeout: float = 300
    ) -> Result:
        """Run ``code`` and fail the test (showing the child's output) unless it exits 0."""
        result = self.run(code, env, timeout)
        assert result.returncode == 0, f"child failed:\n{result.describe()}"
        return result

    def fails(
        self, code: str, env: Mapping[str, str | None] | None = None, timeout: float = 300
    ) -> Result:
        """Run ``code`` and fail the test unless the child exits non-zero."""
        result = self.run(code, env, timeout)
        assert result.returncode != 0, f"child unexpectedly succeeded:\n{result.describe()}"
        return result


@pytest.fixture(scope="session")
def python(tmp_path_factory: pytest.TempPathFactory) -> Python:
    return Python(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(scope="session")
def survey(python: Python) -> dict:
    result = python.ok(_SURVEY)
    return result.json()  # type: ignore[return-value]


def check_shape(survey: dict, shape: str) -> None:
    """Fail (never skip) unless the environment is the install shape ``shape``."""
    expected = SHAPES[shape]
    problems = []
    for name, wanted in expected.items():
        found = survey["dists"][name]
        if wanted and found is None:
            problems.append(f"{name} is not installed")
        elif not wanted and found is not None:
            problems.append(f"{name} {found['version']} is installed but must not be")
        elif found is not None and found["editable"]:
            problems.append(f"{name} is an editable install (the tests need the built wheels)")
    site = tuple(survey["site_packages"])
    for module, origin in survey["origins"].items():
        if origin is not None and not origin.startswith(site):
            problems.append(f"{module} is imported from {origin}, outside site-packages {site}")
    if shape == "broken" and survey["library_exists"]:
        problems.append(f"{survey['library']} still exists (the broken shape removes it)")
    if shape != "broken" and expected["openreg-runtime"] and not survey["library_exists"]:
        problems.append(f"the runtime library {survey['library']} is missing")
    if problems:
        pytest.fail(
            f"this test module needs the '{shape}' install shape "
            f'(uv run nox -s "integration({shape})"), but: ' + "; ".join(problems),
            pytrace=False,
        )


@pytest.fixture(scope="module", autouse=True)
def _require_shape(request: pytest.FixtureRequest, survey: dict) -> None:
    shape = getattr(request.module, "SHAPE", None)
    if shape is None:
        pytest.fail(f"{request.module.__name__} does not declare SHAPE", pytrace=False)
    check_shape(survey, shape)


# Measurements (import times, ...) are printed in the terminal summary, not asserted.
_MEASUREMENTS: list[str] = []


@pytest.fixture
def report() -> Iterator[Callable[[str], None]]:
    yield _MEASUREMENTS.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _MEASUREMENTS:
        terminalreporter.section("openreg measurements")
        for line in _MEASUREMENTS:
            terminalreporter.write_line(line)
