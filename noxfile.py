"""Test sessions for the OpenReg workspace (CI: ``uv run --only-group nox nox``).

Each native package is compiled once per run: ``wheels`` builds every wheel (from
its sdist) into ``dist/``, and every session that tests a package installs those
wheel files into a fresh environment, third-party packages pinned to ``uv.lock``,
so the tests exercise exactly what users install. Only ``sanitize`` compiles
again, with the sanitizers' instrumentation.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import nox

# Every environment nox creates gets precompiled bytecode (see pyproject.toml):
# the tests start many fresh interpreters, and compiling torch's sources on
# each start costs seconds.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")

ROOT = Path(__file__).parent
PYTHON = "3.11"
NO_TORCH_CHECK = "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)"
DIST = ROOT / "dist"
# The workspace distributions, in dependency order (wheel and sdist file name prefixes).
DISTRIBUTIONS = {
    "openreg-runtime": "openreg_runtime",
    "torch-openreg": "torch_openreg",
    "openreg-autoload": "openreg_autoload",
}
# README's install commands, run exactly as written by `wheels` and `integration`: the
# shell block that follows this marker in README.md.
INSTALL_COMMANDS_MARKER = "<!-- install-commands:"
# Install shape -> the workspace wheels it installs (tests: tests/integration/test_<shape>.py);
# the last one is what the shape's README command names.
SHAPES = {
    "runtime-only": ("openreg-runtime",),
    "manual": ("openreg-runtime", "torch-openreg"),
    "autoload": ("openreg-runtime", "torch-openreg", "openreg-autoload"),
    "broken": ("openreg-runtime", "torch-openreg", "openreg-autoload"),
}
# The binding's torch.distributed tests (run by the `distributed` session, not `binding`).
DISTRIBUTED_BINDING_TESTS = (
    "packages/torch-openreg/tests/test_distributed.py",
    "packages/torch-openreg/tests/test_distributed_worlds.py",
)
# The `checked` session runs the whole binding suite again under the debug modes, except
# the files that switch the modes themselves and the distributed tests (which run in
# `distributed`), then the examples.
CHECKED_EXCLUDED = (
    "--ignore=packages/torch-openreg/tests/test_debug_modes.py",
    "--ignore-glob=*/test_distributed*",
)
CHECKED_ENV = {"OPENREG_DEBUG": "races,poison", "OPENREG_DEBUG_RACES": "error"}
CHECKED_EXAMPLES_ENV = {"OPENREG_DEBUG": "races", "OPENREG_DEBUG_RACES": "error"}
# quickstart.py relies on the autoload shim, which the session does not install.
RUN_QUICKSTART = (
    "import runpy, sys, torch_openreg; "
    "sys.exit(runpy.run_path('examples/quickstart.py', run_name='quickstart')['main']())"
)
# Makes the binding unloadable without importing anything of OpenReg or torch:
# find_spec on a top-level package locates it without running it.
BREAK_RUNTIME = """
import importlib.util, pathlib
package = pathlib.Path(importlib.util.find_spec("openreg_runtime").origin).parent
library = package / "lib" / "libopenreg.so"
library.unlink()
print(f"removed {library}")
"""
# Run after uninstalling the shim: `import torch` is back to not knowing openreg.
NO_AUTOLOAD_CHECK = """
import sys
from importlib.metadata import entry_points
import torch
if any(ep.name == "openreg" for ep in entry_points(group="torch.backends")):
    sys.exit("a torch.backends entry point named openreg is still installed")
if "torch_openreg" in sys.modules:
    sys.exit("import torch still imports torch_openreg after uninstalling openreg-autoload")
try:
    torch.ones(1, device="openreg")
except RuntimeError as error:
    if "openreg" not in str(error):
        raise
else:
    sys.exit("the openreg device is still registered by import torch")
import torch_openreg
assert torch.ones(2, device="openreg").sum().item() == 2
print("without openreg-autoload: import torch leaves openreg alone; import torch_openreg works")
"""

# nox -s sanitize: what the runtime is instrumented with (GCC's -fsanitize= list;
# float-cast-overflow is not part of "undefined" in GCC), and how a report ends
# the run. Python itself is not instrumented: the ASan runtime is preloaded.
SANITIZERS = "address,undefined,float-cast-overflow"
SANITIZER_ENV = {
    # handle_segv=0: the device-memory diagnostic tests crash on purpose and
    # expect the runtime's own SIGSEGV handler, not ASan's report.
    # detect_leaks=0: CPython itself leaks at exit (`python -c "import ctypes"`
    # alone reports 82 leaked allocations), and a leak suppression cannot single
    # out CPython's frames, as every stack passes through them. Leaks of the
    # runtime are checked without Python: the C++ driver runs with detect_leaks=1.
    "ASAN_OPTIONS": "handle_segv=0:detect_leaks=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}
SANITIZER_DRIVER = "packages/openreg-runtime/tests/sanitize/streams_and_events.cpp"
STRESS_SMOKE = "packages/torch-openreg/tests/sanitize/stress_smoke.py"

nox.needs_version = ">=2024.10"
nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = [
    "lint",
    "wheels",
    "runtime",
    "binding",
    "checked",
    "distributed",
    "sanitize",
    "wheels",
    "integration",
]


def readme_install_commands(session: nox.Session) -> dict[str, list[str]]:
    """README.md's install commands: ``build`` and, per distribution, its ``pip install``."""
    text = (ROOT / "README.md").read_text()
    if INSTALL_COMMANDS_MARKER not in text:
        session.error(f"README.md lost the {INSTALL_COMMANDS_MARKER} block the sessions run")
    block = text.split(INSTALL_COMMANDS_MARKER, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands: dict[str, list[str]] = {}
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] == ["uv", "build"]:
            commands["build"] = words
        elif words[:2] == ["pip", "install"]:
            commands[words[-1]] = words
        elif words:
            session.error(f"README.md install block: unexpected command {line!r}")
    missing = {"build", *DISTRIBUTIONS} - set(commands)
    if missing:
        session.error(f"README.md install block has no command for {sorted(missing)}")
    return commands


def sync_groups(session: nox.Session, *groups: str) -> None:
    """Install only the dependency ``groups`` from the lock (tools; no workspace package)."""
    command = ["uv", "sync", "--locked", "--no-install-workspace"]
    for group in groups:
        command += ["--only-group", group]
    session.run_install(*command, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


def c_sources() -> list[str]:
    """Every C and C++ source and header of the packages and tests (not build trees)."""
    found = []
    for folder in (ROOT / "packages", ROOT / "tests", ROOT / "benchmarks"):
        for suffix in ("*.c", "*.cpp", "*.h"):
            found += [p for p in folder.rglob(suffix) if "build" not in p.relative_to(ROOT).parts]
    return sorted(str(path.relative_to(ROOT)) for path in found)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint, formatting), clang-format and mypy over the repository; layering checks."""
    sync_groups(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # C and C++ sources against .clang-format (fix: clang-format -i <files>).
    session.run("clang-format", "--dry-run", "--Werror", *c_sources(), silent=True)
    # The packages' Python sources against the extension modules' stubs (*.pyi);
    # configuration and what it cannot see in [tool.mypy] of pyproject.toml.
    session.run("mypy")
    # The binding's C++ layers: includes point downward only.
    session.run("python", "tools/check_layers.py")
    # Stream work is enqueued only through the engine's launch path.
    session.run("python", "tools/check_launch_path.py")
    # pytest from the repository root: no two test modules may share a base name.
    session.run("python", "tools/check_test_names.py")


@nox.session(python=PYTHON, requires=["wheels"])
def runtime(session: nox.Session) -> None:
    """openreg-runtime alone (no torch): its unit tests against the installed wheel."""
    install_built(session, "runtime-only")
    # The runtime must not need torch: prove the environment has none.
    session.run("python", "-c", NO_TORCH_CHECK)
    session.run("pytest", "packages/openreg-runtime/tests", *session.posargs)


@nox.session(python=PYTHON, requires=["wheels"])
def binding(session: nox.Session) -> None:
    """torch-openreg (with torch and openreg-runtime): its pytest suite against the wheel.

    The torch.distributed tests (test_distributed*.py) run in the ``distributed`` session.
    """
    install_built(session, "manual", groups=("bench",))  # matplotlib: benchmarks/tests
    session.run(
        "pytest", "packages/torch-openreg/tests", "--ignore-glob=*/test_distributed*",
        *session.posargs,
    )  # fmt: skip
    # The benchmark runner's own logic (pooling, load readings, the chart from a stored
    # results file); it needs torch and matplotlib, not timing.
    session.run("pytest", "benchmarks/tests", *session.posargs)


@nox.session(python=PYTHON, requires=["wheels"])
def checked(session: nox.Session) -> None:
    """The binding suite and the examples again with the debug modes on: zero reports.

    Every binding test file except test_debug_modes.py (it sets the modes itself) and the
    distributed tests runs with OPENREG_DEBUG=races,poison through the pytest plugin: a
    stream race reported during any test fails it, and poisoned allocations must not
    change any result (docs/debug-modes.md). Then quickstart.py and ddp_train.py --check
    (two ranks under torchrun) run with OPENREG_DEBUG=races, raising at the offending call.
    """
    install_built(session, "manual")
    session.run(
        "pytest", "packages/torch-openreg/tests", *CHECKED_EXCLUDED,
        "-p", "torch_openreg.pytest_plugin", "--openreg-debug=races,poison", *session.posargs,
        env=CHECKED_ENV,
    )  # fmt: skip
    session.run("python", "-c", RUN_QUICKSTART, env=CHECKED_EXAMPLES_ENV)
    session.run(
        "torchrun", "--standalone", "--nproc-per-node", "2", "examples/ddp_train.py", "--check",
        env=CHECKED_EXAMPLES_ENV,
    )  # fmt: skip


@nox.session(python=PYTHON, requires=["wheels"])
def distributed(session: nox.Session) -> None:
    """torch.distributed on openreg: the orgloo backend's tests, torchrun, simulated hosts.

    The binding's test_distributed*.py (collectives against Gloo on CPU, stream order,
    DDP, FSDP2, DTensor, failures; worlds of 2-4 processes), then tests/distributed:
    torchrun on localhost, and torchrun on two simulated hosts — network namespaces
    joined by a veth pair, which the tests create and delete (root required: the
    session fails rather than skips without it).
    """
    install_built(session, "manual")
    session.run("pytest", *DISTRIBUTED_BINDING_TESTS, *session.posargs)
    session.run("pytest", "tests/distributed", *session.posargs,
                env={"OPENREG_REQUIRE_NETNS": "1"})  # fmt: skip


@nox.session(python=PYTHON)
def wheels(session: nox.Session) -> None:
    """Build the wheel and sdist of every workspace package once, into dist/ (for integration)."""
    shutil.rmtree(DIST, ignore_errors=True)
    # README's build command, exactly as written (it builds each wheel from its
    # sdist, which also proves the sdists are complete). The binding's setup.py
    # imports torch: no backend may autoload while it builds.
    build = readme_install_commands(session)["build"]
    session.run(*build, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    for prefix in DISTRIBUTIONS.values():
        built = sorted(p.name for p in DIST.glob(f"{prefix}-*") if p.suffix in (".whl", ".gz"))
        if len(built) != 2:
            session.error(f"expected one wheel and one sdist of {prefix} in {DIST}, found {built}")
        session.log(f"built {', '.join(built)}")


def built_wheel(session: nox.Session, distribution: str) -> str:
    """The single wheel of ``distribution`` in dist/; a clear error if ``wheels`` has not run."""
    found = sorted(DIST.glob(f"{DISTRIBUTIONS[distribution]}-*.whl"))
    if len(found) != 1:
        session.error(
            f"expected exactly one {distribution} wheel in {DIST}, "
            f"found {[p.name for p in found]}: run `uv run nox -s wheels` first "
            "(the integration sessions install from its output)"
        )
    return str(found[0])


def locked_requirements(session: nox.Session, shape: str, groups: tuple[str, ...] = ()) -> str:
    """A requirements file pinning the third-party packages of ``shape`` to ``uv.lock``.

    The test group (pytest, numpy) and ``groups`` always; torch and its dependencies
    when the shape installs the binding. Workspace packages are left out: they come
    from dist/.
    """
    name = "-".join(("requirements", shape, *groups)) + ".txt"
    path = Path(session.create_tmp()) / name
    command = ["uv", "export", "--locked", "--no-hashes", "--no-header", "--no-emit-workspace"]
    if "torch-openreg" in SHAPES[shape]:
        command += ["--package", "torch-openreg", "--no-default-groups", "--group", "test"]
        command += [option for group in groups for option in ("--group", group)]
    else:
        command += ["--only-group", "test"]
        command += [option for group in groups for option in ("--only-group", group)]
    session.run_install(*command, "--output-file", str(path), silent=True)
    return str(path)


def install_built(session: nox.Session, shape: str, groups: tuple[str, ...] = ()) -> None:
    """Install the wheels of ``shape`` from dist/, third-party packages (the test group and
    ``groups``) pinned to uv.lock."""
    wheels = [built_wheel(session, distribution) for distribution in SHAPES[shape]]
    session.install("-r", locked_requirements(session, shape, groups), *wheels)


@nox.session(python=PYTHON, requires=["wheels"])
@nox.parametrize("shape", [nox.param(shape, id=shape) for shape in SHAPES])
def integration(session: nox.Session, shape: str) -> None:
    """One install shape from the built wheels: tests/integration/test_<shape>.py.

    The wheels are installed with README's pip command for the shape, exactly as
    written; third-party packages come pinned from uv.lock first, so pip finds them
    installed. The autoload shape (all three packages) also runs every Python block
    of the documentation (tests/docs) and the stub check (tests/stubs).
    """
    for distribution in SHAPES[shape]:
        built_wheel(session, distribution)  # a clear error if `wheels` has not run
    session.install("-r", locked_requirements(session, shape))
    session.run("python", "-m", "ensurepip", "--default-pip", silent=True)
    pip_install = readme_install_commands(session)[SHAPES[shape][-1]]
    session.run(*pip_install, env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if shape == "runtime-only":
        session.run("python", "-c", NO_TORCH_CHECK)
    if shape == "broken":
        session.run("python", "-c", BREAK_RUNTIME)
    session.run("pytest", f"tests/integration/test_{shape.replace('-', '_')}.py", *session.posargs)
    if shape == "autoload":
        session.run("pytest", "tests/docs", "tests/stubs", *session.posargs)
        # Last step, outside pytest: removing the shim turns autoload off again.
        python = str(Path(session.bin) / "python")
        session.run("uv", "pip", "uninstall", "--python", python, "openreg-autoload")
        session.run("python", "-c", NO_AUTOLOAD_CHECK)


def compiler_file(session: nox.Session, name: str) -> str:
    """Path of a GCC runtime library (libasan.so, ...); a clear error if GCC lacks it."""
    path = session.run("g++", f"-print-file-name={name}", silent=True, external=True).strip()
    if not Path(path).is_absolute():
        session.error(f"g++ has no {name}: install GCC's sanitizer runtimes (libasan8, libtsan2)")
    return path


@nox.session(python=PYTHON)
def sanitize(session: nox.Session) -> None:
    """Runtime and binding under ASan+UBSan, runtime streams/events under TSan.

    Zero reports: any sanitizer report fails the session. See README, "Sanitizers".
    """
    # 1. ASan + UBSan: the runtime wheel built instrumented, its whole test suite.
    wheel_dir = Path(session.create_tmp()) / "sanitized-wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    # (The wheels are built from sdists, as in `wheels`: never in the source tree,
    # whose build directories belong to the developer's normal builds.)
    session.run(
        "uv", "build", "--out-dir", str(wheel_dir), "packages/openreg-runtime",
        env={"OPENREG_SANITIZE": SANITIZERS},
    )  # fmt: skip
    (wheel,) = wheel_dir.glob("openreg_runtime-*.whl")
    session.install("-r", locked_requirements(session, "runtime-only"), str(wheel))
    session.run("python", "-c", NO_TORCH_CHECK)
    # libstdc++ preloaded too: ASan must find the real __cxa_throw when it starts,
    # and Python (C) would only load libstdc++ later, with the first extension.
    preload = [compiler_file(session, "libasan.so"), compiler_file(session, "libstdc++.so")]
    env = {"LD_PRELOAD": " ".join(preload), **SANITIZER_ENV}
    # --capture=sys: a sanitizer report goes to file descriptor 2, which pytest's
    # default capture would swallow along with the aborted process.
    session.run(
        "pytest", "--capture=sys", "packages/openreg-runtime/tests", *session.posargs, env=env
    )
    # 2. A C++ driver of streams, events and frees from several host threads, built
    # with the runtime's sources (Python cannot run under TSan uninstrumented):
    # under TSan three times, and under ASan+UBSan with leak detection.
    runtime = ROOT / "packages" / "openreg-runtime"
    sources = sorted(str(path) for path in (runtime / "csrc" / "runtime").glob("*.cpp"))
    include = f"-I{runtime / 'src' / 'openreg_runtime' / 'include'}"
    for sanitizers, options in (
        ("thread", {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}),
        (SANITIZERS, {**SANITIZER_ENV, "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1"}),
    ):
        driver = Path(session.create_tmp()) / f"streams_and_events_{sanitizers.split(',')[0]}"
        session.run(
            "g++", "-std=c++17", "-O1", "-g", f"-fsanitize={sanitizers}",
            "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror",
            include, *sources, str(ROOT / SANITIZER_DRIVER), "-o", str(driver), "-pthread",
            external=True,
        )  # fmt: skip
        for _ in range(3 if sanitizers == "thread" else 1):
            session.run(str(driver), env=options, external=True)
    # 3. The binding instrumented the same way, with torch, under a stress smoke test.
    binding_dir = Path(session.create_tmp()) / "sanitized-binding"
    shutil.rmtree(binding_dir, ignore_errors=True)
    session.run(
        "uv", "build", "--out-dir", str(binding_dir), "packages/torch-openreg",
        env={"TORCH_OPENREG_SANITIZE": SANITIZERS, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )  # fmt: skip
    (binding,) = binding_dir.glob("torch_openreg-*.whl")
    session.install("-r", locked_requirements(session, "manual"), str(binding))
    session.run("python", STRESS_SMOKE, env=env)


@nox.session(python=PYTHON, requires=["wheels"])
def bench(session: nox.Session) -> None:
    """Benchmarks (not in the default run): benchmarks/run.py against the installed wheels.

    Writes the table to the log, the raw numbers to benchmarks/results.json and a chart
    of every figure against its target to benchmarks/results.png
    (``uv run nox -s bench -- --output FILE`` or ``-- --quick`` pass options through).
    """
    install_built(session, "autoload", groups=("bench",))  # matplotlib: the chart
    output = ROOT / "benchmarks" / "results.json"
    session.run("python", "benchmarks/run.py", "--output", str(output), *session.posargs)
