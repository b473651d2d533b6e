"""Builds torch_openreg._C, the one extension module of the binding.

Metadata lives in pyproject.toml. The extension is compiled with ninja
(parallel translation units) against the torch found in the build environment
and against the runtime's C header ``openreg.h``, the binding's only contract
with openreg-runtime. It is not linked against ``libopenreg.so``: the runtime's
``or*`` symbols stay undefined in ``_C`` and are bound when ``_C`` is imported,
because ``torch_openreg`` first loads the library globally through
``openreg_runtime.load_library()``. So building the binding needs the header
only, never a built runtime, and no rpath or absolute path is recorded.

The header is taken from the first of (see ``runtime_include_dir``):

1. the runtime's sources next to this package in a checkout
   (``uv sync``, ``uv build``, ``pip install <checkout>/packages/torch-openreg``);
2. this sdist's copy (``include/openreg.h``, written when the sdist is made, so a
   wheel built from the sdist needs nothing else);
3. an installed openreg-runtime, located without importing it (importing would
   load its library), e.g. ``pip install --no-build-isolation`` of this folder alone.
"""

from __future__ import annotations

import os

# A previously installed autoload shim must not load the package being built.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = Path(__file__).parent.resolve()
BUILD_INFO = "src/torch_openreg/_build_info.py"
HEADER = "openreg.h"
CHECKOUT_INCLUDE = HERE.parent / "openreg-runtime" / "src" / "openreg_runtime" / "include"
# Where the sdist keeps its copy of the header (relative to the sdist's root).
SDIST_INCLUDE = "include"
# The torch headers most of the binding's files include, and which take most of their
# compile time: parsed once per build into a precompiled header that GCC loads before
# each file (docs/ci.md). Each file still includes what it uses itself.
PRECOMPILED_TORCH_HEADERS = (
    "c10/util/Exception.h",
    "ATen/core/Tensor.h",
    "ATen/core/dispatch/Dispatcher.h",
    "torch/library.h",
)


def build_switch(name: str, default: bool) -> bool:
    """An on/off build variable: 1 or 0 (unset: ``default``); anything else is refused,
    as a misspelt value would otherwise silently build the other way."""
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise SystemExit(f"torch-openreg: {name}={value!r} is invalid: set it to 1 or 0.")
    return default if value == "" else value == "1"


# TORCH_OPENREG_PRECOMPILED_HEADER=0 compiles every file from its includes alone.
PRECOMPILED_HEADER = build_switch("TORCH_OPENREG_PRECOMPILED_HEADER", default=True)
# TORCH_OPENREG_UNITY_BUILD=1 compiles each folder of csrc/ as one translation unit
# that includes the folder's files, so torch's headers are parsed once per folder.
# `nox -s sanitize` builds so (its instrumented build runs in every CI run). Normal
# builds compile file by file: each file must include what it uses, and names in
# anonymous namespaces must differ between the files of one folder.
UNITY_BUILD = build_switch("TORCH_OPENREG_UNITY_BUILD", default=False)


def installed_runtime_include() -> Path | None:
    """The include directory of an installed openreg_runtime, found without importing it."""
    spec = importlib.util.find_spec("openreg_runtime")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "include"


def runtime_include_dir() -> Path:
    """The directory holding the runtime's ``openreg.h``; a clear error if there is none."""
    candidates = [CHECKOUT_INCLUDE, HERE / SDIST_INCLUDE]
    installed = installed_runtime_include()
    if installed is not None:
        candidates.append(installed)
    for directory in candidates:
        if (directory / HEADER).is_file():
            return directory
    searched = ", ".join(str(directory / HEADER) for directory in candidates)
    raise SystemExit(
        f"torch-openreg cannot be built: the OpenReg runtime header {HEADER} was not found "
        f"(looked for {searched}). Build from a checkout of the OpenReg repository (the "
        "runtime's sources next to packages/torch-openreg), from the torch-openreg sdist, or "
        "install openreg-runtime into the build environment first."
    )


def is_gcc(compiler: str) -> bool:
    """Whether ``compiler`` is GCC (whose precompiled headers Clang cannot read)."""
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True)
    except OSError:
        return False
    return version.returncode == 0 and "Free Software Foundation" in version.stdout


class OpenRegBuildExtension(BuildExtension):
    """PyTorch's extension build, with the torch headers precompiled (GCC) and the
    optional unity build."""

    def build_extension(self, ext: CppExtension) -> None:
        if UNITY_BUILD:
            ext.sources = self.unity_sources(ext.sources)
        compiler = self.compiler.compiler_so
        if PRECOMPILED_HEADER and is_gcc(compiler[0]):
            header = self.precompile_torch_headers(compiler, ext)
            # A precompiled header GCC cannot use would be replaced by the header's
            # text without a word, and the build would be slow for no visible reason:
            # made an error, it says why (e.g. "settings for -fexceptions do not match").
            ext.extra_compile_args += ["-include", str(header), "-Werror=invalid-pch"]
        super().build_extension(ext)

    def unity_sources(self, sources: list[str]) -> list[str]:
        """One generated source per folder of ``sources``, including the folder's files."""
        folders: dict[str, list[str]] = {}
        for source in sources:
            folders.setdefault(Path(source).parent.name, []).append(source)
        unity = Path(self.build_temp) / "unity"
        unity.mkdir(parents=True, exist_ok=True)
        generated = []
        for folder, files in sorted(folders.items()):
            text = "".join(f'#include "{(HERE / name).resolve()}"\n' for name in sorted(files))
            path = unity / f"{folder}.cpp"
            if not path.is_file() or path.read_text() != text:  # unchanged: not rebuilt
                path.write_text(text)
            generated.append(os.path.relpath(path, HERE))
        return generated

    def precompile_torch_headers(self, compiler: list[str], ext: CppExtension) -> Path:
        """Compiles the header into ``<header>.gch`` with the flags every file is
        compiled with (GCC uses it only then), unless an identical one exists: a new
        one would make every object file out of date."""
        header = Path(self.build_temp).resolve() / "precompiled" / "torch_headers.h"
        text = "".join(f"#include <{name}>\n" for name in PRECOMPILED_TORCH_HEADERS)
        includes = [f"-I{d}" for d in [*ext.include_dirs, *self.compiler.include_dirs]]
        command = [*compiler, *includes, *ext.extra_compile_args, "-x", "c++-header"]
        command += [str(header), "-o", f"{header}.gch"]
        stamp = hashlib.sha256(f"{torch.__version__}\n{text}\n{command}".encode()).hexdigest()
        stamp_file = header.with_suffix(".stamp")
        built = Path(f"{header}.gch").is_file() and stamp_file.is_file()
        if built and stamp_file.read_text() == stamp:
            return header
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text(text)
        print(f"precompiling {', '.join(PRECOMPILED_TORCH_HEADERS)}", flush=True)
        subprocess.run(command, check=True)
        stamp_file.write_text(stamp)
        return header


class BuildPyWithBuildInfo(build_py):
    """Records the torch version the extension is compiled against."""

    def run(self) -> None:
        (HERE / BUILD_INFO).write_text(
            '"""Generated by setup.py: the torch this build was compiled against."""\n\n'
            f'TORCH_VERSION = "{torch.__version__}"\n'
        )
        super().run()


class SdistWithRuntimeHeader(sdist):
    """Puts the runtime's header into the sdist, so its wheel builds from it alone."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        target = Path(base_dir) / SDIST_INCLUDE
        target.mkdir(exist_ok=True)
        shutil.copyfile(runtime_include_dir() / HEADER, target / HEADER)


sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").rglob("*.cpp"))

# TORCH_OPENREG_SANITIZE=address,undefined,... builds _C instrumented, for
# `nox -s sanitize`; unset for normal builds. (Not OPENREG_SANITIZE, which
# instruments the runtime, a separate build.)
SANITIZE = os.environ.get("TORCH_OPENREG_SANITIZE", "").strip()
SANITIZER_FLAGS = (
    [f"-fsanitize={SANITIZE}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    if SANITIZE
    else []
)

setup(
    ext_modules=[
        CppExtension(
            "torch_openreg._C",
            sources=sources,
            # torch/include/kineto: PyTorch's PrivateUse1 profiler registry header
            # includes Kineto's headers by bare name (integration/profiler.cpp).
            include_dirs=[
                str(HERE / "csrc"),
                str(runtime_include_dir()),
                str(Path(torch.__file__).parent / "include" / "kineto"),
            ],
            # -g0: no debug information (Python's default -g makes _C 27 MB).
            extra_compile_args=[
                "-O1" if SANITIZE else "-O2",
                "-g0",
                # Stated, not left to PyTorch's default: the precompiled header is
                # compiled with exactly these flags.
                "-std=c++20",
                "-Wall",
                "-Wno-unused-parameter",
                "-Wno-interference-size",
                "-fvisibility=hidden",
                *SANITIZER_FLAGS,
            ],
            extra_link_args=SANITIZER_FLAGS,
        )
    ],
    cmdclass={
        "build_ext": OpenRegBuildExtension.with_options(use_ninja=True),
        "build_py": BuildPyWithBuildInfo,
        "sdist": SdistWithRuntimeHeader,
    },
)
