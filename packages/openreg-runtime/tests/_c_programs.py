"""C programs written against the runtime's C API (openreg.h), for the tests: the
checking macro they share and their build against the installed library."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import openreg_runtime as rt

# Returns 1 from the calling function, naming the call and the runtime's error, when a
# runtime call fails. Needs <stdio.h> and "openreg.h" included before it.
CHECK_MACRO = r"""
#define CHECK(call)                                                              \
  do {                                                                           \
    orError_t status_ = (call);                                                  \
    if (status_ != orSuccess) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, orGetErrorName(status_),     \
              orGetLastErrorMessage());                                          \
      return 1;                                                                  \
    }                                                                            \
  } while (0)
"""


def build_c_program(text: str, directory: Path, name: str, *flags: str) -> Path:
    """Compiles ``text`` as strict C11 (warnings are errors) against the installed
    runtime, linked to its library by path; returns the executable."""
    compiler = shutil.which("cc")
    assert compiler is not None, "a C compiler (cc) is required to test the C API"
    source = directory / f"{name}.c"
    source.write_text(text)
    executable = directory / name
    library = rt.get_library_dir()
    command = [compiler, "-std=c11", *flags, "-Wall", "-Wextra", "-Werror", "-pedantic",
               f"-I{rt.get_include()}", str(source), "-o", str(executable), f"-L{library}",
               "-lopenreg", f"-Wl,-rpath,{library}"]  # fmt: skip
    build = subprocess.run(command, capture_output=True, text=True, check=False)
    assert build.returncode == 0, f"{' '.join(command)}\n{build.stderr}"
    return executable
