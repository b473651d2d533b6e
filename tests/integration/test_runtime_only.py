"""Install shape ``runtime-only``: the openreg-runtime wheel alone, no torch.

The runtime is usable from Python and, through the header and library shipped
inside its wheel, from C.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

from conftest import Python

SHAPE = "runtime-only"

C_PROGRAM = r"""
#include <openreg.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call) do { orError_t e_ = (call); if (e_ != orSuccess) { \
    fprintf(stderr, "%s failed: %s: %s\n", #call, orGetErrorName(e_), orGetLastErrorMessage()); \
    return 1; } } while (0)

int main(void) {
    int count = 0, version = 0;
    CHECK(orGetDeviceCount(&count));
    CHECK(orRuntimeGetVersion(&version));
    const char message[] = "hello from C";
    char back[sizeof message] = {0};
    void* device = NULL;
    CHECK(orMalloc(&device, sizeof message));
    CHECK(orMemcpy(device, message, sizeof message, orMemcpyHostToDevice));
    CHECK(orMemcpy(back, device, sizeof message, orMemcpyDeviceToHost));
    CHECK(orFree(device));
    if (memcmp(message, back, sizeof message) != 0) { fprintf(stderr, "mismatch\n"); return 1; }
    printf("devices=%d version=%d roundtrip=%s\n", count, version, back);
    return 0;
}
"""


def test_torch_is_not_installed(python: Python) -> None:
    result = python.ok(
        """
        import importlib.util, sys
        print(importlib.util.find_spec("torch") is None)
        """
    )
    assert result.last_line == "True", "torch must not be installed in the runtime-only shape"


def test_runtime_works_without_torch(python: Python) -> None:
    result = python.ok(
        """
        import json, sys
        import openreg_runtime as ort

        data = bytes(range(256)) * 4
        with ort.DeviceBuffer(len(data), device=1) as buffer:
            buffer.copy_from(data)
            back = buffer.to_bytes()
        print(json.dumps({
            "count": ort.device_count(),
            "roundtrip": back == data,
            "torch_imported": "torch" in sys.modules,
        }))
        """
    )
    assert result.json() == {"count": 2, "roundtrip": True, "torch_imported": False}


def test_header_and_library_are_in_the_installed_wheel(python: Python) -> None:
    result = python.ok(
        """
        import importlib.metadata as md, json, pathlib, sysconfig
        import openreg_runtime as ort

        site = [pathlib.Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")]
        recorded = {str(f.locate().resolve()) for f in md.files("openreg-runtime")}
        found = {}
        header = pathlib.Path(ort.get_include()) / "openreg.h"
        for path in (header.resolve(), pathlib.Path(ort.library_path()).resolve()):
            found[path.name] = {
                "exists": path.is_file(),
                "in_site_packages": any(path.is_relative_to(s) for s in site),
                "in_wheel_record": str(path) in recorded,
            }
        print(json.dumps(found))
        """
    )
    expected = {"exists": True, "in_site_packages": True, "in_wheel_record": True}
    assert result.json() == {"openreg.h": expected, "libopenreg.so": expected}


def test_c_program_links_against_the_installed_wheel(python: Python, tmp_path: Path) -> None:
    compiler = shutil.which("cc")
    assert compiler is not None, "a C compiler (cc) is required for this test"
    paths = python.ok(
        "import openreg_runtime as o; print(o.get_include()); print(o.get_library_dir())"
    ).stdout.split()
    include, library = paths
    source = tmp_path / "demo.c"
    source.write_text(textwrap.dedent(C_PROGRAM))
    program = tmp_path / "demo"
    build = subprocess.run(
        [compiler, str(source), f"-I{include}", f"-L{library}", "-lopenreg",
         f"-Wl,-rpath,{library}", "-o", str(program)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, f"cc failed:\n{build.stdout}\n{build.stderr}"
    env = python.environment()
    run = subprocess.run([str(program)], capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, f"demo failed:\n{run.stdout}\n{run.stderr}"
    assert run.stdout.startswith("devices=2 version=")
    assert run.stdout.rstrip().endswith("roundtrip=hello from C")
