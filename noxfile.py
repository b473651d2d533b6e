"""Test sessions for the OpenReg workspace (run with ``uv run nox``).

One session per install shape. Every session builds its environment from
``uv.lock`` (``uv sync --locked``) with the workspace packages installed as
regular, non-editable wheels, so the tests exercise what users install.
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHON = "3.11"
NO_TORCH_CHECK = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"

nox.needs_version = ">=2024.10"
nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "runtime", "binding"]


def sync_locked(session: nox.Session, *packages: str, groups: tuple[str, ...] = ("test",)) -> None:
    """Install ``packages`` (workspace members) and dependency ``groups`` from the lock."""
    command = ["uv", "sync", "--locked", "--no-editable", "--no-default-groups"]
    for package in packages:
        command += ["--package", package]
    for group in groups:
        command += ["--group", group]
    session.run_install(*command, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting check over the whole repository."""
    sync_locked(session, groups=("lint",))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def runtime(session: nox.Session) -> None:
    """openreg-runtime alone (no torch): its unit tests against the installed wheel."""
    sync_locked(session, "openreg-runtime")
    # The runtime must not need torch: prove the environment has none.
    session.run("python", "-c", NO_TORCH_CHECK)
    session.run("pytest", "packages/openreg-runtime/tests", *session.posargs)


@nox.session(python=PYTHON)
def binding(session: nox.Session) -> None:
    """torch-openreg (with torch and openreg-runtime): its pytest suite against the installed wheel."""
    sync_locked(session, "torch-openreg")
    session.run("pytest", "packages/torch-openreg/tests", *session.posargs)
