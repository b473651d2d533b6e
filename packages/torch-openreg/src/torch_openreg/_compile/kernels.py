"""Building, loading and calling the C++ kernels Inductor generates for openreg.

Inductor's CPU backend compiles a kernel ``extern "C" void kernel(const float*
in_ptr0, float* out_ptr0, int64_t ks0, ...)`` plus a Python binding that calls it
at once with the tensors' data pointers. For openreg that cannot work: the data
pointers are device addresses the host must not touch, and the kernel must run
later, on the device's stream. So the same kernel source gets, instead of the
Python binding, one extra function of a fixed signature::

    extern "C" const char* openreg_kernel_entry(const uint64_t* words)

which unpacks one 64-bit word per argument, calls ``kernel`` and returns the
message of any exception it threw (or null). The library is built by Inductor's
``CppCodeCache`` (same compiler command line as the CPU backend, same on-disk
cache, compiled in the compile-worker pool when there is one) and loaded with
ctypes. ``torch_openreg._C._CompiledKernel`` wraps the entry's address; calling
it with Inductor's arguments translates tensor addresses to the kernel view and
enqueues the call on the current stream (csrc/engine/compiled_kernel_launch.h).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch._inductor.async_compile import AsyncCompile, get_compile_threads
from torch._inductor.codecache import CppCodeCache, LambdaFuture, _get_cpp_prefix_header
from torch._inductor.utils import clear_on_fresh_cache

from .. import _C

ENTRY_NAME = "openreg_kernel_entry"
# The function Inductor's CPU backend names the kernel in its source.
KERNEL_NAME = "kernel"


def argument_kind(argtype: str) -> str:
    """The launcher's kind letter for one C++ parameter type Inductor declares.

    ``r``: a pointer the kernel reads, ``w``: one it writes, ``i``: int64, ``f``: float.
    """
    declared = argtype.strip()
    if declared.endswith("*"):
        return "r" if declared.startswith("const ") else "w"
    base = declared.removeprefix("const ").strip()
    if base in ("int64_t", "long"):
        return "i"
    if base == "float":
        return "f"
    raise NotImplementedError(
        f"an Inductor kernel for openreg takes a C++ argument of type {argtype!r}, which the "
        "openreg launcher does not support (it passes tensors, int64 and float values); "
        "compile this function with backend='aot_eager' instead"
    )


def entry_source(argtypes: Sequence[str]) -> str:
    """C++ source of the uniform entry point that calls ``kernel`` with ``argtypes``."""
    arguments = []
    for position, argtype in enumerate(argtypes):
        kind = argument_kind(argtype)
        word = f"words[{position}]"
        if kind in "rw":
            pointer = argtype.strip().removeprefix("const ").strip()
            qualifier = "const " if kind == "r" else ""
            arguments.append(f"reinterpret_cast<{qualifier}{pointer}>({word})")
        elif kind == "i":
            arguments.append(f"static_cast<int64_t>({word})")
        else:
            arguments.append(f"openreg_float_argument({word})")
    call = f"{KERNEL_NAME}({', '.join(arguments)});"
    return f"""
// openreg: one entry point of a fixed signature, called on a stream worker by
// torch_openreg._C (csrc/engine/compiled_kernel_launch.h).
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
static inline float openreg_float_argument(uint64_t word) {{
    double value;
    std::memcpy(&value, &word, sizeof(value));
    return static_cast<float>(value);
}}
extern "C" __attribute__((visibility("default"))) const char* {ENTRY_NAME}(const uint64_t* words) {{
    try {{
        {call}
    }} catch (const std::exception& error) {{
        static thread_local std::string message;
        message = error.what();
        return message.c_str();
    }} catch (...) {{
        return "a compiled openreg kernel threw an exception that is not a std::exception";
    }}
    return nullptr;
}}
"""


@clear_on_fresh_cache
class OpenRegKernelCodeCache(CppCodeCache):
    """Kernel libraries for openreg: plain shared objects, loaded with ctypes.

    Same compile options as Inductor's CPU kernels (no libtorch, shared), its own
    in-memory table (the on-disk cache is keyed by the source, which differs).
    """

    cache: ClassVar[dict[str, Callable[[], Any]]] = {}
    cpp_compile_command_flags: ClassVar[dict[str, Any]] = {"include_pytorch": False, "shared": True}

    @classmethod
    def _get_uncompiled_header(cls, device: str) -> str | None:
        # The kernel source includes Inductor's CPU prelude (cpp_prefix.h), which is
        # most of each compile; Inductor's CPU kernels get it as a precompiled header
        # (config.cpp_cache_precompile_headers) through this hook, so openreg's do too.
        return _get_cpp_prefix_header(device)

    @staticmethod
    def cache_clear() -> None:
        OpenRegKernelCodeCache.cache.clear()


def _bind(name: str, kinds: str, library: ctypes.CDLL) -> Any:
    entry = ctypes.cast(getattr(library, ENTRY_NAME), ctypes.c_void_p).value
    if entry is None:
        raise RuntimeError(f"compiled openreg kernel {name!r} has no entry point {ENTRY_NAME}")
    return _C._CompiledKernel(name, entry, kinds)


def load_kernel(
    async_compile: AsyncCompile, name: str, argtypes: Sequence[str], source: str
) -> Any:
    """What generated wrapper code calls for each openreg kernel (instead of
    ``async_compile.cpp_pybinding``): compile ``source`` with the entry point added
    and return the launcher, or a future of it when compile workers are in use."""
    kinds = "".join(argument_kind(argtype) for argtype in argtypes)
    code = source + entry_source(argtypes)
    # As cpp_pybinding: AsyncCompile.wait() resolves futures only when compile
    # threads are in use; otherwise the kernel must be ready now.
    if get_compile_threads() <= 1:
        return _bind(name, kinds, OpenRegKernelCodeCache.load(code))
    get_library = OpenRegKernelCodeCache.load_async(code, submit_fn=async_compile.submit)
    return LambdaFuture(functools.partial(_load_bound, name, kinds, get_library))


def _load_bound(name: str, kinds: str, get_library: Callable[[], Any]) -> Any:
    return _bind(name, kinds, get_library())


_DEVICES: dict[int, torch.device] = {}


def empty_strided_openreg(
    size: Sequence[int], stride: Sequence[int], dtype: torch.dtype, index: int
) -> torch.Tensor:
    """A buffer of the generated wrapper on openreg device ``index``."""
    device = _DEVICES.get(index)
    if device is None:
        device = _DEVICES.setdefault(index, torch.device("openreg", index))
    return torch.empty_strided(size, stride, dtype=dtype, device=device)
