"""Builds libopenreg.so (a plain C-API shared library) and the pybind11 module.

Metadata lives in pyproject.toml; this file only describes the two native
artifacts, because setuptools has no declarative way to ship a non-Python
shared library that an extension module links against:

* ``openreg_runtime/lib/libopenreg.so`` — the runtime (``-fvisibility=hidden``;
  only the ``OR_API`` functions of ``openreg.h`` are exported), with soname
  ``libopenreg.so`` so dependents find it once it is loaded.
* ``openreg_runtime/_runtime*.so`` — Python bindings, linked against the
  library with an ``$ORIGIN``-relative rpath (no absolute paths anywhere).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pybind11 import get_include as pybind11_include
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent.resolve()
HEADER_DIR = "src/openreg_runtime/include"
LIBRARY_NAME = "openreg_runtime.lib.libopenreg"
CXX_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-Wall", "-Wextra", "-fvisibility=hidden"]
LINK_FLAGS: list[str] = []
# OPENREG_SANITIZE=address,undefined,float-cast-overflow (any -fsanitize= list)
# builds both artifacts instrumented, for `nox -s sanitize`: errors abort at
# once, with frame pointers for readable stacks. Unset for normal builds.
SANITIZE = os.environ.get("OPENREG_SANITIZE", "").strip()
if SANITIZE:
    if not all(part.replace("-", "").isalnum() for part in SANITIZE.split(",")):
        raise SystemExit(
            f"OPENREG_SANITIZE={SANITIZE!r} is invalid: give a comma-separated -fsanitize= list, "
            "e.g. address,undefined,float-cast-overflow"
        )
    SANITIZER_FLAGS = [f"-fsanitize={SANITIZE}", "-fno-sanitize-recover=all"]
    CXX_FLAGS = [f for f in CXX_FLAGS if f != "-O2"]
    # -g1: line tables, all a sanitizer report's stack needs, cheaper to compile than -g.
    CXX_FLAGS += ["-O1", "-g1", "-fno-omit-frame-pointer", *SANITIZER_FLAGS]
    LINK_FLAGS += SANITIZER_FLAGS


class SharedLibrary(Extension):
    """A shared library that is not a Python module (no Python headers/suffix)."""


class BuildNative(build_ext):
    def run(self) -> None:
        # Editable installs copy the library into src/openreg_runtime/lib,
        # which is not under version control; make sure it exists.
        (HERE / "src" / "openreg_runtime" / "lib").mkdir(exist_ok=True)
        super().run()

    def get_ext_filename(self, fullname: str) -> str:
        # setuptools asks with the dotted name or with its last component only.
        if fullname in (LIBRARY_NAME, LIBRARY_NAME.rsplit(".", 1)[-1]):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def build_extension(self, ext: Extension) -> None:
        if isinstance(ext, SharedLibrary):
            self._build_shared_library(ext)
            return
        ext.library_dirs = [os.path.dirname(self.get_ext_fullpath(LIBRARY_NAME))]
        super().build_extension(ext)

    def _build_shared_library(self, ext: SharedLibrary) -> None:
        output = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(output), exist_ok=True)
        # One compiler process per source, in parallel: this machine has few cores.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            objects = list(pool.map(lambda source: self._compile_one(ext, source), ext.sources))
        self.compiler.link_shared_object(
            [obj for group in objects for obj in group],
            output,
            extra_postargs=[
                "-Wl,-soname,libopenreg.so",
                "-Wl,--version-script," + str(HERE / "csrc/runtime/libopenreg.map"),
                "-pthread",
                *LINK_FLAGS,
            ],
            target_lang="c++",
        )

    def _compile_one(self, ext: SharedLibrary, source: str) -> list[str]:
        return self.compiler.compile(
            [source],
            output_dir=self.build_temp,
            include_dirs=ext.include_dirs,
            extra_postargs=ext.extra_compile_args,
        )


runtime_sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc/runtime").glob("*.cpp"))
binding_sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc/python").glob("*.cpp"))

setup(
    ext_modules=[
        SharedLibrary(
            LIBRARY_NAME,
            sources=runtime_sources,
            include_dirs=[HEADER_DIR],
            extra_compile_args=CXX_FLAGS,
        ),
        Extension(
            "openreg_runtime._runtime",
            sources=binding_sources,
            include_dirs=[HEADER_DIR, pybind11_include()],
            libraries=["openreg"],
            runtime_library_dirs=["$ORIGIN/lib"],
            extra_compile_args=CXX_FLAGS,
            extra_link_args=LINK_FLAGS,
            language="c++",
        ),
    ],
    cmdclass={"build_ext": BuildNative},
)
