"""Test sessions for the OpenReg workspace (CI: ``uv run --only-group nox nox``).

Each native package is compiled once per run: ``wheels`` builds every wheel (from
its sdist) into ``dist/`` and installs them, third-party packages pinned to
``uv.lock``, into the environments that the test suites share: ``runtime`` runs in
the runtime-only one, ``binding``, ``binding-interpreters``, ``checked`` and
``distributed`` in the one with the binding. Each ``integration(<shape>)`` session
installs the same wheel files with README's uv and pip commands for its shape, so the
tests exercise exactly what users install.
Only ``sanitize`` and ``sanitize-drivers`` compile again, with the sanitizers'
instrumentation. Independent sessions run side by side (``nox.options.parallel``).
"""

from __future__ import annotations

import functools
import os
import re
import resource
import shlex
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nox

# Tests start many fresh interpreters: each must find the bytecode of what an earlier
# one imported (the first interpreter that imports a module writes it), so writing it is
# never switched off.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The sessions' environments are installed without compiling bytecode (pyproject.toml
# asks uv to, for the development environment): compiling all of torch costs about 15 s
# of CPU time per environment, and the tests import only part of it.
NO_BYTECODE = "--no-compile-bytecode"

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
RUNTIME_HEADER = ROOT / "packages" / "openreg-runtime" / "src" / "openreg_runtime" / "include"
# README's install commands, run exactly as written by `wheels` and `integration`: the
# shell blocks that follow these markers in README.md, one per name (build, uv, pip).
INSTALL_COMMANDS_MARKER = "<!-- install-commands:"
INSTALL_BLOCK = re.compile(
    r"^<!-- install-commands: (\w+)[^\n]*-->\n```sh\n(.*?)^```", re.MULTILINE | re.DOTALL
)


@dataclass(frozen=True)
class Shape:
    """An install shape: the workspace wheels it installs (the last one is what the
    shape's README command names) and what its integration session proves."""

    wheels: tuple[str, ...]
    proves: str


# Tests of each shape: tests/integration/test_<shape>.py.
SHAPES = {
    "runtime-only": Shape(
        ("openreg-runtime",),
        "Proves `pip install openreg-runtime` alone (no torch): Python API, header, library, C.",
    ),
    "manual": Shape(
        ("openreg-runtime", "torch-openreg"),
        "Proves `pip install torch-openreg` (no shim): `import torch_openreg` registers openreg.",
    ),
    "autoload": Shape(
        ("openreg-runtime", "torch-openreg", "openreg-autoload"),
        "Proves `pip install openreg-autoload`: `import torch` registers openreg; docs, stubs.",
    ),
    "broken": Shape(
        ("openreg-runtime", "torch-openreg", "openreg-autoload"),
        "Proves autoload with libopenreg.so deleted: `import torch` works, with one warning.",
    ),
}
# The environments `wheels` prepares for the test suites (shape, extra dependency groups):
# the runtime's without torch; the binding's with matplotlib for benchmarks/tests.
SHARED_ENVIRONMENTS = {"runtime-only": (), "manual": ("bench",)}
# The binding's torch.distributed tests (run by the `distributed` session, not `binding`).
DISTRIBUTED_BINDING_TESTS = (
    "packages/torch-openreg/tests/test_distributed.py",
    "packages/torch-openreg/tests/test_distributed_worlds.py",
)
# The `checked` session runs the binding suite again under the debug modes, except the
# files that switch the modes themselves, the distributed tests (which run in
# `distributed`) and the tests whose device work runs only in interpreters they start
# (marked child_interpreters, see pyproject.toml; they run in `binding-interpreters`), then
# the examples.
CHECKED_EXCLUDED = (
    "--ignore=packages/torch-openreg/tests/test_debug_modes.py",
    "--ignore-glob=*/test_distributed*",
    "-m",
    "not child_interpreters",
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

# nox -s sanitize and sanitize-drivers: what the native code is instrumented with
# (GCC's -fsanitize= list; float-cast-overflow is not part of "undefined" in GCC), and
# how a report ends the run. Python itself is not instrumented: the ASan runtime is
# preloaded.
SANITIZERS = "address,undefined,float-cast-overflow"
SANITIZER_ENV = {
    # handle_segv=0: the device-memory diagnostic tests crash on purpose and
    # expect the runtime's own SIGSEGV handler, not ASan's report.
    # detect_leaks=0: CPython itself leaks at exit (`python -c "import ctypes"`
    # alone reports 82 leaked allocations), and a leak suppression cannot single
    # out CPython's frames, as every stack passes through them. Leaks of the
    # native code are checked without Python: the C++ drivers run with detect_leaks=1.
    "ASAN_OPTIONS": "handle_segv=0:detect_leaks=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}
LEAK_CHECK_ENV = {**SANITIZER_ENV, "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1"}
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}
TSAN_RUNS = 3
STRESS_SMOKE = "packages/torch-openreg/tests/sanitize/stress_smoke.py"
# The binding's tests run under ASan+UBSan (with the runtime instrumented too): where
# host threads, stream workers, rank processes and exit paths share native memory.
SANITIZED_BINDING_TESTS = (
    *(
        f"packages/torch-openreg/tests/{name}"
        for name in (
            "test_streams.py",
            "test_events.py",
            "test_stream_allocator.py",
            "test_caching_allocator.py",
            "test_kernel_allocations.py",
            "test_memory_pools.py",
            "test_debug_modes.py",
            "test_processes.py",
            "test_distributed.py",
            "test_distributed_worlds.py",
            "test_exit_path.py",
            "test_graphs.py",
        )
    ),
    *(
        f"packages/torch-openreg/tests/{test}"
        for test in (
            "test_autograd.py::test_exit_waits_for_a_busy_autograd_device_thread",
            "test_autograd.py::test_exit_gives_up_on_an_autograd_thread_that_never_goes_idle",
            "test_async_execution.py::test_a_kernel_error_pending_at_exit_is_reported_and_fails_the_process",
            "test_async_execution.py::test_kernel_errors_pending_at_exit_on_two_devices_are_all_reported",
            "test_async_execution.py::test_a_kernel_error_reported_before_exit_is_not_reported_again",
        )
    ),
)
# Left out under the sanitizers, where they would check no native code that the
# selected tests leave unchecked (all of them run in `binding`, `binding-interpreters` or
# `distributed`):
SANITIZE_DESELECTED = tuple(
    f"--deselect=packages/torch-openreg/tests/{test}"
    for test in (
        # 12 rounds of mask indexing, nonzero and unique on 1M elements (sorting under ASan
        # dominates); the same operations run in steady loops on 50k elements in the
        # same file (test_a_steady_loop_reserves_at_most_twice_its_peak_plus_a_segment).
        "test_kernel_allocations.py::test_mask_indexing_runs_on_a_small_device_without_running_out",
        # Worlds of 4 ranks: each rank runs the same native code as in the worlds of 2,
        # which stay; four instrumented interpreters cost about 20 s of CPU per test.
        "test_distributed_worlds.py::test_every_collective_matches_gloo_on_cpu[4]",
        "test_distributed_worlds.py::test_ddp_matches_single_process_training[4]",
        # The pytest plugin refusing bad options: pytest's usage errors, no device work.
        "test_debug_modes.py::test_pytest_plugin_refuses_a_seed",
    )
)
RUNTIME_SOURCES = ROOT / "packages" / "openreg-runtime" / "csrc" / "runtime"
RUNTIME_DRIVER = (
    ROOT / "packages" / "openreg-runtime" / "tests" / "sanitize" / "streams_and_events.cpp"
)
BINDING_CSRC = ROOT / "packages" / "torch-openreg" / "csrc"
BINDING_DRIVER = (
    ROOT / "packages" / "torch-openreg" / "tests" / "sanitize" / "allocator_threads.cpp"
)
# What allocator_threads.cpp is built from: the binding's sources that need no Python
# (the rest of base/ takes the GIL or reports to the profiler; the launch path and the
# race detector reach Python through the engine).
BINDING_DRIVER_SOURCES = (
    "base/address_ranges.cpp",
    "base/brief_lock.cpp",
    "base/byte_units.cpp",
    "base/debug_modes.cpp",
    "base/device.cpp",
    "base/environment.cpp",
    "base/kernel_thread.cpp",
    "base/runtime_check.cpp",
    "base/stream_capture.cpp",
    "base/sync_debug.cpp",
    "memory/block_pool.cpp",
    "memory/block_pool_shared.cpp",
    "memory/block_pool_streams.cpp",
    "integration/device_allocator.cpp",
    "integration/stream.cpp",
    "engine/kernel_allocator.cpp",
)
# Allocator rules the binding driver breaks on purpose (--allocator-fault): it must fail.
ALLOCATOR_FAULTS = ("ignore-recorded-streams", "kernels-ignore-queued-work")

nox.needs_version = ">=2026.10"
nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
# The machine's cores are used by independent sessions at once: while one waits
# (for its rank processes, a held stream, a subprocess starting), another computes.
# `--parallel 1` (or NOX_PARALLEL=1) runs them one after another, with live output.
nox.options.parallel = 4
nox.options.allow_parallel = True
# With sessions side by side the order is the schedule: a session starts as soon as a
# slot is free and what it requires has run, the longest first (CPU time of each in
# docs/ci.md), so that the run does not end on one long session alone.
nox.options.sessions = [
    "wheels",
    "sanitize",
    "binding",
    "binding-interpreters",
    "checked",
    "integration(autoload)",
    "distributed",
    "sanitize-drivers",
    "lint",
    "runtime",
    "integration(runtime-only)",
    "integration(manual)",
    "integration(broken)",
]


def timed(function: Callable[[nox.Session], None]) -> Callable[[nox.Session], None]:
    """Ends the session's log with its wall time and the CPU time of the commands it ran
    (user + system, children included): the figures CI timings are explained with."""

    @functools.wraps(function)
    def run(session: nox.Session) -> None:
        start, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            function(session)
        finally:
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            session.log(f"timing: {time.monotonic() - start:.0f} s wall, {cpu:.0f} s CPU")

    return run


@dataclass(frozen=True)
class InstallCommands:
    """README.md's install commands: the build, and per distribution its install command
    in the uv recipe (``uv pip install``) and in the pip recipe (``pip install``)."""

    build: list[str]
    uv: dict[str, list[str]]
    pip: dict[str, list[str]]


def parse_install_commands(text: str) -> InstallCommands:
    """The commands of README's install blocks (``build``, ``uv``, ``pip``); ValueError
    for a missing block or command, or a line the sessions would not know how to run."""
    blocks = {name: body for name, body in INSTALL_BLOCK.findall(text)}
    if sorted(blocks) != ["build", "pip", "uv"]:
        raise ValueError(
            f"README.md must have the {INSTALL_COMMANDS_MARKER} blocks build, uv and pip "
            f"(found {sorted(blocks)})"
        )
    prefixes = {"build": ["uv", "build"], "uv": ["uv", "pip", "install"], "pip": ["pip", "install"]}
    found: dict[str, dict[str, list[str]]] = {name: {} for name in prefixes}
    for name, prefix in prefixes.items():
        for line in blocks[name].splitlines():
            words = shlex.split(line, comments=True)
            if words[: len(prefix)] == prefix:
                found[name][words[-1]] = words
            elif words and not makes_environment(words):
                raise ValueError(f"README.md install block {name}: unexpected command {line!r}")
    builds = list(found["build"].values())
    missing = [f"{name} {dist}" for name in ("uv", "pip") for dist in DISTRIBUTIONS
               if dist not in found[name]]  # fmt: skip
    if len(builds) != 1 or missing:
        raise ValueError(f"README.md install blocks: need one uv build and {missing}")
    return InstallCommands(builds[0], found["uv"], found["pip"])


def makes_environment(words: list[str]) -> bool:
    """A line of README's recipes that makes or activates the reader's environment
    (`uv venv DIR`, `python3.11 -m venv DIR`, `source DIR/bin/activate`): the session's
    own environment, already active (nox sets VIRTUAL_ENV and PATH), stands in for it."""
    return words[:2] == ["uv", "venv"] or words[1:3] == ["-m", "venv"] or words[0] == "source"


def readme_install_commands(session: nox.Session) -> InstallCommands:
    """README.md's install commands, or the session's error naming what is wrong."""
    try:
        return parse_install_commands((ROOT / "README.md").read_text())
    except ValueError as error:
        session.error(str(error))


def sync_groups(session: nox.Session, *groups: str) -> None:
    """Install only the dependency ``groups`` from the lock (tools; no workspace package)."""
    command = ["uv", "sync", "--locked", "--no-install-workspace"]
    for group in groups:
        command += ["--only-group", group]
    session.run_install(*command, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


def c_sources() -> list[str]:
    """Every C and C++ source and header git tracks. Listed by git rather than by walking
    the folders: a build tree is no source, and `wheels` and `sanitize`, running beside
    `lint`, write and delete release trees in packages/ while a walk would read them."""
    listed = subprocess.run(
        ["git", "ls-files", "*.c", "*.cpp", "*.h"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode != 0:
        raise RuntimeError(f"git ls-files failed (lint needs a git checkout): {listed.stderr}")
    return listed.stdout.split()


@nox.session(python=PYTHON)
@timed
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


# ---- Wheels, built once, and the environments the suites share --------------------


def built_wheel(session: nox.Session, distribution: str) -> str:
    """The single wheel of ``distribution`` in dist/; a clear error if ``wheels`` has not run."""
    found = sorted(DIST.glob(f"{DISTRIBUTIONS[distribution]}-*.whl"))
    if len(found) != 1:
        session.error(
            f"expected exactly one {distribution} wheel in {DIST}, "
            f"found {[p.name for p in found]}: run `uv run --only-group nox nox -s wheels` "
            "first (the test sessions install from its output)"
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
    if "torch-openreg" in SHAPES[shape].wheels:
        command += ["--package", "torch-openreg", "--no-default-groups", "--group", "test"]
        command += [option for group in groups for option in ("--group", group)]
    else:
        command += ["--only-group", "test"]
        command += [option for group in groups for option in ("--only-group", group)]
    session.run_install(*command, "--output-file", str(path), silent=True, external=True)
    return str(path)


def install_built(session: nox.Session, shape: str, groups: tuple[str, ...] = ()) -> None:
    """Install the wheels of ``shape`` from dist/ into the session's environment,
    third-party packages (the test group and ``groups``) pinned to uv.lock."""
    wheels = [built_wheel(session, distribution) for distribution in SHAPES[shape].wheels]
    session.install(NO_BYTECODE, "-r", locked_requirements(session, shape, groups), *wheels)


def shared_environment(session: nox.Session, shape: str) -> Path:
    """Where `wheels` installs the environment of ``shape`` that several sessions share."""
    return session.cache_dir / f"environment-{shape}"


def check_sdist_header(session: nox.Session) -> None:
    """The binding's sdist must carry the runtime's header, byte for byte: its wheel
    is built from the sdist alone (see packages/torch-openreg/setup.py)."""
    (sdist,) = DIST.glob(f"{DISTRIBUTIONS['torch-openreg']}-*.tar.gz")
    with tarfile.open(sdist) as archive:
        member = f"{sdist.name.removesuffix('.tar.gz')}/include/openreg.h"
        try:
            carried = archive.extractfile(member)
        except KeyError:
            carried = None
        if carried is None or carried.read() != (RUNTIME_HEADER / "openreg.h").read_bytes():
            session.error(f"{sdist.name} does not carry the runtime's openreg.h as {member}")


@nox.session(venv_backend="none")
@timed
def wheels(session: nox.Session) -> None:
    """Build every package's wheel and sdist once into dist/; install the suites' environments."""
    shutil.rmtree(DIST, ignore_errors=True)
    # README's build command, exactly as written (it builds each wheel from its
    # sdist, which also proves the sdists are complete). The binding's setup.py
    # imports torch: no backend may autoload while it builds.
    build = readme_install_commands(session).build
    session.run(*build, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, external=True)
    for prefix in DISTRIBUTIONS.values():
        built = sorted(p.name for p in DIST.glob(f"{prefix}-*") if p.suffix in (".whl", ".gz"))
        if len(built) != 2:
            session.error(f"expected one wheel and one sdist of {prefix} in {DIST}, found {built}")
        session.log(f"built {', '.join(built)}")
    check_sdist_header(session)
    for shape, groups in SHARED_ENVIRONMENTS.items():
        location = shared_environment(session, shape)
        session.run("uv", "venv", "--quiet", "--clear", "--python", PYTHON, str(location))
        wheel_files = [built_wheel(session, name) for name in SHAPES[shape].wheels]
        session.run(
            "uv", "pip", "install", NO_BYTECODE, "--python", str(location / "bin" / "python"),
            "-r", locked_requirements(session, shape, groups), *wheel_files,
        )  # fmt: skip


def run_shared(
    session: nox.Session, shape: str, *args: str, env: dict[str, str] | None = None
) -> None:
    """Run ``args`` (a console script of the environment, e.g. pytest) in the shared
    environment of ``shape`` that `wheels` installed."""
    location = shared_environment(session, shape)
    if not (location / "bin" / "python").is_file():
        session.error(
            f"the {shape} environment ({location}) does not exist: run "
            f"`uv run --only-group nox nox -s wheels` first (it builds and installs it)"
        )
    bin_dir = location / "bin"
    variables = {"VIRTUAL_ENV": str(location), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    session.run(str(bin_dir / args[0]), *args[1:], env={**variables, **(env or {})}, external=True)


@nox.session(venv_backend="none", requires=["wheels"])
@timed
def runtime(session: nox.Session) -> None:
    """openreg-runtime alone (no torch): its unit tests against the installed wheel."""
    # The runtime must not need torch: prove the environment has none.
    run_shared(session, "runtime-only", "python", "-c", NO_TORCH_CHECK)
    run_shared(
        session, "runtime-only", "pytest", "packages/openreg-runtime/tests", *session.posargs
    )


@nox.session(venv_backend="none", requires=["wheels"])
@timed
def binding(session: nox.Session) -> None:
    """torch-openreg (with torch and openreg-runtime): its pytest suite against the wheel.

    The tests marked ``child_interpreters`` run in ``binding-interpreters``, beside this
    session, and the torch.distributed tests (test_distributed*.py) in ``distributed``.
    """
    run_shared(
        session, "manual", "pytest", "packages/torch-openreg/tests",
        "--ignore-glob=*/test_distributed*", "-m", "not child_interpreters", *session.posargs,
    )  # fmt: skip
    # The benchmark runner's own logic (pooling, load readings, the chart from a stored
    # results file); it needs torch and matplotlib, not timing.
    run_shared(session, "manual", "pytest", "benchmarks/tests", *session.posargs)


@nox.session(venv_backend="none", requires=["wheels"], name="binding-interpreters")
@timed
def binding_interpreters(session: nox.Session) -> None:
    """The binding's tests marked ``child_interpreters``: their device work runs in fresh
    interpreters they start. Apart from ``binding`` so that the two halves of the suite,
    each mostly waiting on one process at a time, run side by side."""
    run_shared(
        session, "manual", "pytest", "packages/torch-openreg/tests",
        "--ignore-glob=*/test_distributed*", "-m", "child_interpreters", *session.posargs,
    )  # fmt: skip


@nox.session(venv_backend="none", requires=["wheels"])
@timed
def checked(session: nox.Session) -> None:
    """The binding suite and the examples again with the debug modes on: zero reports.

    Every binding test file except test_debug_modes.py (it sets the modes itself) and the
    distributed tests runs with OPENREG_DEBUG=races,poison through the pytest plugin: a
    stream race reported during any test fails it, and poisoned allocations must not
    change any result (docs/debug-modes.md). Then quickstart.py and ddp_train.py --check
    (two ranks under torchrun) run with OPENREG_DEBUG=races, raising at the offending call.
    """
    run_shared(
        session, "manual", "pytest", "packages/torch-openreg/tests", *CHECKED_EXCLUDED,
        "-p", "torch_openreg.pytest_plugin", "--openreg-debug=races,poison", *session.posargs,
        env=CHECKED_ENV,
    )  # fmt: skip
    run_shared(session, "manual", "python", "-c", RUN_QUICKSTART, env=CHECKED_EXAMPLES_ENV)
    run_shared(
        session, "manual", "torchrun", "--standalone", "--nproc-per-node", "2",
        "examples/ddp_train.py", "--check", env=CHECKED_EXAMPLES_ENV,
    )  # fmt: skip


@nox.session(venv_backend="none", requires=["wheels"])
@timed
def distributed(session: nox.Session) -> None:
    """torch.distributed on openreg: the orgloo backend's tests, torchrun, simulated hosts.

    The binding's test_distributed*.py (collectives against Gloo on CPU, stream order,
    DDP, FSDP2, DTensor, failures; worlds of 2-4 processes), then tests/distributed:
    torchrun on localhost, and torchrun on two simulated hosts — network namespaces
    joined by a veth pair, which the tests create and delete (root required: the
    session fails rather than skips without it).
    """
    run_shared(session, "manual", "pytest", *DISTRIBUTED_BINDING_TESTS, *session.posargs)
    run_shared(
        session, "manual", "pytest", "tests/distributed", *session.posargs,
        env={"OPENREG_REQUIRE_NETNS": "1"},
    )  # fmt: skip


# ---- Install shapes ---------------------------------------------------------------


def run_integration(session: nox.Session, shape: str) -> None:
    """The wheels of ``shape`` installed with README's uv command for it, removed, and
    installed again with README's pip command, both exactly as written (third-party
    packages come pinned from uv.lock first, so both find them installed), then
    tests/integration/test_<shape>.py."""
    for distribution in SHAPES[shape].wheels:
        built_wheel(session, distribution)  # a clear error if `wheels` has not run
    session.install(NO_BYTECODE, "-r", locked_requirements(session, shape))
    commands = readme_install_commands(session)
    distribution = SHAPES[shape].wheels[-1]
    python = str(Path(session.bin) / "python")
    session.run(*commands.uv[distribution])  # into the active environment (VIRTUAL_ENV)
    session.run("uv", "pip", "uninstall", "--python", python, *SHAPES[shape].wheels)
    session.run("python", "-m", "ensurepip", "--default-pip", silent=True)
    session.run(*commands.pip[distribution], env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if shape == "runtime-only":
        session.run("python", "-c", NO_TORCH_CHECK)
    if shape == "broken":
        session.run("python", "-c", BREAK_RUNTIME)
    session.run("pytest", f"tests/integration/test_{shape.replace('-', '_')}.py", *session.posargs)
    if shape == "autoload":
        # Every Python block of the documentation, and the stubs against the modules.
        session.run("pytest", "tests/docs", "tests/stubs", *session.posargs)
        # Last step, outside pytest: removing the shim turns autoload off again.
        python = str(Path(session.bin) / "python")
        session.run("uv", "pip", "uninstall", "--python", python, "openreg-autoload")
        session.run("python", "-c", NO_AUTOLOAD_CHECK)


def define_integration_session(shape: str) -> None:
    """Registers ``integration(<shape>)``, whose `nox -l` line says what it proves."""

    @timed
    def session_function(session: nox.Session) -> None:
        run_integration(session, shape)

    session_function.__doc__ = SHAPES[shape].proves
    nox.session(
        session_function,
        python=PYTHON,
        name=f"integration({shape})",
        tags=["integration"],
        requires=["wheels"],
    )


for _shape in SHAPES:
    define_integration_session(_shape)


# ---- Sanitizers -------------------------------------------------------------------


def compiler_file(session: nox.Session, name: str) -> str:
    """Path of a GCC runtime library (libasan.so, ...); a clear error if GCC lacks it."""
    path = session.run("g++", f"-print-file-name={name}", silent=True, external=True)
    if not isinstance(path, str) or not Path(path.strip()).is_absolute():
        session.error(f"g++ has no {name}: install GCC's sanitizer runtimes (libasan8, libtsan2)")
    return path.strip()


def preloaded_asan_env(session: nox.Session) -> dict[str, str]:
    """The environment that runs uninstrumented Python over instrumented extensions."""
    # libstdc++ preloaded too: ASan must find the real __cxa_throw when it starts,
    # and Python (C) would only load libstdc++ later, with the first extension.
    preload = [compiler_file(session, "libasan.so"), compiler_file(session, "libstdc++.so")]
    return {"LD_PRELOAD": " ".join(preload), **SANITIZER_ENV}


def workspace_copy(target: Path) -> Path:
    """A copy of the workspace's sources at ``target`` (its pyproject.toml, whose build
    constraints pin torch, and packages/), without build outputs."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copy2(ROOT / "pyproject.toml", target / "pyproject.toml")
    outputs = shutil.ignore_patterns("build", "dist", "*.egg-info", "*.so", "__pycache__", "lib")
    shutil.copytree(ROOT / "packages", target / "packages", ignore=outputs)
    return target


@nox.session(python=PYTHON)
@timed
def sanitize(session: nox.Session) -> None:
    """Runtime and binding built with ASan+UBSan, under the runtime's and the binding's tests.

    The runtime's whole suite; the binding's stream, event, allocator, race-detector,
    process, distributed and exit-path tests (SANITIZED_BINDING_TESTS) and a stress
    smoke test. Zero reports: any sanitizer report fails the session. See
    docs/development.md, "Sanitizers".
    """
    # Both wheels built instrumented, from sdists as in `wheels`, of a copy of the
    # workspace: making an sdist writes into the package's folder (its egg-info, a
    # release tree), which `wheels`, running beside this session, does at the same time,
    # and the source tree's build directories belong to the developer's normal builds.
    tmp = Path(session.create_tmp())
    workspace = workspace_copy(tmp / "workspace")
    wheel_dir = tmp / "sanitized-wheels"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    # The binding as a unity build (a translation unit per csrc/ folder, see its setup.py):
    # torch's headers, most of each file's compile time, are parsed once per folder.
    for package, variables in (
        ("openreg-runtime", {"OPENREG_SANITIZE": SANITIZERS}),
        ("torch-openreg", {"TORCH_OPENREG_SANITIZE": SANITIZERS, "TORCH_OPENREG_UNITY_BUILD": "1"}),
    ):
        session.run(
            "uv", "build", "--out-dir", str(wheel_dir), str(workspace / "packages" / package),
            env={**variables, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, external=True,
        )  # fmt: skip
    wheel_files = [
        str(next(wheel_dir.glob(f"{DISTRIBUTIONS[name]}-*.whl")))
        for name in SHAPES["manual"].wheels
    ]
    session.install(NO_BYTECODE, "-r", locked_requirements(session, "manual"), *wheel_files)
    env = preloaded_asan_env(session)
    # --capture=sys: a sanitizer report goes to file descriptor 2, which pytest's
    # default capture would swallow along with the aborted process.
    session.run(
        "pytest", "--capture=sys", "packages/openreg-runtime/tests", *session.posargs, env=env
    )
    # Rank processes, forked and spawned children inherit the preload.
    session.run(
        "pytest", "--capture=sys", *SANITIZED_BINDING_TESTS, *SANITIZE_DESELECTED,
        *session.posargs, env=env,
    )  # fmt: skip
    session.run("python", STRESS_SMOKE, env=env)


def compile_all(session: nox.Session, commands: Sequence[list[str]]) -> None:
    """Runs compiler commands side by side, one per core; a failure shows its output."""
    session.log(f"compiling {len(commands)} files")

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(run, commands))
    for command, result in zip(commands, results, strict=True):
        if result.returncode != 0:
            session.error(f"{shlex.join(command)} failed:\n{result.stderr}")


@dataclass(frozen=True)
class DriverBuild:
    """The sanitizer drivers built with one -fsanitize= list into ``folder``."""

    sanitizers: str
    folder: Path
    torch_dir: Path

    def flags(self, *, binding: bool) -> list[str]:
        # -g1: line tables, all a report's stack needs, at three quarters of -g's compile time.
        common = ["-O1", "-g1", f"-fsanitize={self.sanitizers}", "-fno-sanitize-recover=all"]
        common += ["-fno-omit-frame-pointer", "-Wall", f"-I{RUNTIME_HEADER}"]
        if not binding:
            return ["-std=c++17", *common, "-Wextra", "-Werror"]
        # The binding's own warning switches (setup.py): its sources are not -Wextra clean.
        include = self.torch_dir / "include"
        return [
            "-std=c++20", *common, "-Wno-unused-parameter", "-Wno-interference-size",
            f"-I{BINDING_CSRC}", "-isystem", str(include),
            "-isystem", str(include / "torch" / "csrc" / "api" / "include"),
        ]  # fmt: skip

    def objects(self, sources: Sequence[Path], *, binding: bool) -> dict[Path, list[str]]:
        """Object file -> the command compiling it."""
        folder = self.folder / ("binding" if binding else "runtime")
        folder.mkdir(parents=True, exist_ok=True)
        return {
            folder / f"{source.stem}.o": ["g++", *self.flags(binding=binding), "-c", str(source),
                                          "-o", str(folder / f"{source.stem}.o")]
            for source in sources
        }  # fmt: skip

    def build(self, session: nox.Session) -> tuple[str, str]:
        """Compiles and links streams_and_events and allocator_threads; their paths."""
        runtime = self.objects(sorted(RUNTIME_SOURCES.glob("*.cpp")), binding=False)
        binding = self.objects(
            [BINDING_CSRC / name for name in BINDING_DRIVER_SOURCES], binding=True
        )
        runtime_driver = self.objects([RUNTIME_DRIVER], binding=False)
        binding_driver = self.objects([BINDING_DRIVER], binding=True)
        for command in binding_driver.values():
            command.insert(1, "-Werror")
        compile_all(session, [*runtime.values(), *binding.values(),
                              *runtime_driver.values(), *binding_driver.values()])  # fmt: skip
        programs = (self.folder / "streams_and_events", self.folder / "allocator_threads")
        link = ["g++", f"-fsanitize={self.sanitizers}", "-pthread", "-o"]
        torch_lib = self.torch_dir / "lib"
        torch_libraries = [f"-L{torch_lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_lib}"]
        compile_all(session, [
            [*link, str(programs[0]), *map(str, runtime_driver), *map(str, runtime)],
            [*link, str(programs[1]), *map(str, binding_driver), *map(str, binding),
             *map(str, runtime), *torch_libraries],
        ])  # fmt: skip
        return str(programs[0]), str(programs[1])


@nox.session(python=PYTHON, name="sanitize-drivers")
@timed
def sanitize_drivers(session: nox.Session) -> None:
    """C++ drivers of runtime streams and the binding's allocator under TSan and ASan+LSan.

    Python cannot run under ThreadSanitizer uninstrumented, so these programs are built
    from the native sources that need no Python, with the drivers in */tests/sanitize/:
    several runs under TSan, one under ASan+UBSan with leak detection.
    """
    # torch only for its headers and libc10/libtorch_cpu: nothing imports it here.
    session.install(NO_BYTECODE, "-r", locked_requirements(session, "manual"))
    find_torch = (
        "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
    )
    torch_dir = Path(str(session.run("python", "-c", find_torch, silent=True)).strip())
    build = Path(session.create_tmp()) / "drivers"
    shutil.rmtree(build, ignore_errors=True)
    # Under TSan several times: interleavings differ from run to run.
    for program in DriverBuild("thread", build / "tsan", torch_dir).build(session) * TSAN_RUNS:
        session.run(program, env=TSAN_ENV, external=True)
    # Under ASan+UBSan with leak detection, once.
    programs = DriverBuild(SANITIZERS, build / "asan", torch_dir).build(session)
    for program in programs:
        session.run(program, env=LEAK_CHECK_ENV, external=True)
    # The binding driver's checks can fail: with an allocator rule broken on purpose it
    # must name the broken rule and exit with 1.
    for fault in ALLOCATOR_FAULTS:
        output = session.run(
            programs[1], f"--allocator-fault={fault}", env=SANITIZER_ENV, external=True,
            silent=True, success_codes=[1],
        )  # fmt: skip
        if "FAILED:" not in str(output):
            session.error(f"allocator_threads --allocator-fault={fault} failed naming no check")


@nox.session(python=PYTHON, requires=["wheels"])
@timed
def bench(session: nox.Session) -> None:
    """Benchmarks (not in the default run): benchmarks/run.py against the installed wheels.

    Writes the table to the log, the raw numbers to benchmarks/results.json and a chart
    of every figure against its target to benchmarks/results.png
    (``uv run nox -s bench -- --output FILE`` or ``-- --quick`` pass options through).
    """
    install_built(session, "autoload", groups=("bench",))  # matplotlib: the chart
    output = ROOT / "benchmarks" / "results.json"
    session.run("python", "benchmarks/run.py", "--output", str(output), *session.posargs)
