"""Inductor's openreg backend: CPU C++ kernels that run on openreg streams.

Registered with ``torch._inductor.codegen.common`` when Inductor first lowers a
graph for openreg (``torch.openreg._inductor_backend_init``):

* **Scheduling** — Inductor's CPU C++/OpenMP scheduling, unchanged except that
  every kernel's source is tagged, so an openreg kernel and a CPU kernel of the
  same source (a graph may hold both) are never deduplicated into one.
* **Wrapper code** — Inductor's Python wrapper with three differences for
  openreg nodes: a tagged kernel is built by ``kernels.load_kernel`` (an entry
  point of fixed signature instead of a Python binding) and called through the
  binding's launcher, which enqueues it on the current stream of its device
  instead of running it on the host; buffers are allocated on the node's openreg
  device (index included: openreg has no device guards, being host-like);
  extern kernels (``extern_kernels.mm`` ...) are unchanged, they are openreg
  operators and already run asynchronously on the stream.
* **Device op overrides** — what the wrapper emits for device and stream
  queries (raw stream, set device, synchronize, device guard).

The C++ wrapper (``cpp_wrapper=True``) and AOTInductor are not supported: their
generated C++ would have to launch kernels through this binding itself.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.stream_utils import get_stream_name
from torch._inductor.virtualized import V

_NAME = "openreg"
# First line of every openreg kernel's source (a C++ comment).
KERNEL_TAG = "// openreg kernel: launched on an openreg stream by torch_openreg._C"
_CPU_DEFINITION = "async_compile.cpp_pybinding("
_OPENREG_DEFINITION = "openreg_load_kernel(async_compile, {name!r}, "


class OpenRegScheduling(CppScheduling):
    """Inductor's C++ scheduling, with openreg kernels' sources tagged."""

    def define_kernel(self, src_code: str, nodes: Any, kernel_args: Any = None) -> str:
        return super().define_kernel(f"{KERNEL_TAG}\n{src_code}", nodes, kernel_args)


class _OpenRegWrapperMixin:
    """The openreg-specific parts of the Python wrapper (main graph and subgraphs)."""

    def define_kernel(
        self,
        kernel_name: str,
        kernel_body: str,
        metadata: str | None = None,
        gpu: bool = True,
        cpp_definition: str | None = None,
    ) -> None:
        if KERNEL_TAG in kernel_body:
            if not kernel_body.startswith(_CPU_DEFINITION):
                raise RuntimeError(
                    "torch_openreg does not recognise the kernel definition Inductor "
                    f"generated for {kernel_name} (expected {_CPU_DEFINITION!r}...); this "
                    "torch version is not supported by this torch_openreg build"
                )
            loader = _OPENREG_DEFINITION.format(name=kernel_name)
            kernel_body = loader + kernel_body[len(_CPU_DEFINITION) :]
        super().define_kernel(  # type: ignore[misc]
            kernel_name, kernel_body, metadata, gpu=gpu, cpp_definition=cpp_definition
        )

    def _generate_kernel_call_helper(
        self,
        kernel_name: str,
        call_args: Any,
        *,
        device: Any = None,
        triton: bool = True,
        **kwargs: Any,
    ) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if device.type == _NAME and not triton:
            # The launcher object takes exactly the CPU kernel's arguments.
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))  # type: ignore[attr-defined]
            return
        super()._generate_kernel_call_helper(  # type: ignore[misc]
            kernel_name, call_args, device=device, triton=triton, **kwargs
        )

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        shape: Any,
        stride: Any,
        allocation_shape: Any = None,
        is_pinned: bool = False,
    ) -> str:
        if device.type != _NAME:
            return super().make_allocation(  # type: ignore[misc]
                name, device, dtype, shape, stride, allocation_shape, is_pinned
            )
        if allocation_shape is None:
            allocation_shape = shape
        codegen_shape = self.codegen_python_shape_tuple(shape)  # type: ignore[attr-defined]
        codegen_allocation = self.codegen_python_shape_tuple(allocation_shape)  # type: ignore[attr-defined]
        codegen_stride = self.codegen_python_shape_tuple(stride)  # type: ignore[attr-defined]
        index = device.index if device.index is not None else torch.openreg.current_device()
        arguments = f"{codegen_allocation}, {codegen_stride}, {dtype}, {index}"
        line = f"{name} = empty_strided_openreg({arguments})"
        if codegen_shape != codegen_allocation:
            line += f".as_strided({codegen_shape}, {codegen_stride})"
        return line


class OpenRegWrapperCodegen(_OpenRegWrapperMixin, PythonWrapperCodegen):
    """Python wrapper code for graphs that run on openreg."""

    _streams_defined = False

    def codegen_enter_cuda_stream_context(self, code: Any, stream_idx: int) -> None:
        # Graphs with user streams switch with `with stream{i}:`. GPU devices
        # define those names when entering their device guard; openreg has no
        # device guard, so they are defined before the first switch (at the
        # top level of call(): the default stream is the one current there).
        if not self._streams_defined:
            self._streams_defined = True
            code.writeline("from torch._dynamo.variables.streams import _get_stream_by_index")
            code.writeline(f"{get_stream_name(0)} = torch.openreg.current_stream()")
            for index, user_object in V.graph.scheduler.stream_idx_to_user_obj_idx.items():
                if index != 0:
                    code.writeline(
                        f"{get_stream_name(index)} = _get_stream_by_index({user_object})"
                    )
        super().codegen_enter_cuda_stream_context(code, stream_idx)

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            if subgraph_name is None or parent_wrapper is None:
                raise AssertionError("a subgraph wrapper needs its name and parent wrapper")
            return OpenRegSubgraphWrapperCodegen(
                subgraph_name, parent_wrapper, partition_signatures
            )
        return OpenRegWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(
            "from torch_openreg._compile.kernels import "
            "empty_strided_openreg, load_kernel as openreg_load_kernel"
        )


class OpenRegSubgraphWrapperCodegen(_OpenRegWrapperMixin, SubgraphPythonWrapperCodegen):
    """Wrapper code of subgraphs (control flow) inside an openreg graph."""


class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    """Device and stream expressions in generated Python wrapper code."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_openreg._C import _current_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.openreg.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.openreg.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"


def _uses_cpp_codegen(device: torch.device | None) -> bool:
    return device is not None and device.type in ("cpu", _NAME)


def _teach_inductor_cpp_devices() -> None:
    """Make Inductor treat openreg like the CPU where it means "C++ code generator".

    Inductor decides some code-generation questions by ``device.type == "cpu"``
    although they are about its C++ backend: the scheduler skips loop
    reordering for "CPU" nodes (the C++ kernels do not support it, and fusing
    with it crashes), and ``get_current_backend()`` answers "triton" for any
    device it does not know. Both are redirected for openreg nodes only;
    everything else Inductor does for other devices is unchanged.
    """
    from torch._inductor import scheduler, utils
    from torch._inductor.codegen import common

    def is_cpu(node: scheduler.BaseSchedulerNode) -> bool:
        return _uses_cpp_codegen(node.get_device())

    scheduler.BaseSchedulerNode.is_cpu = is_cpu  # type: ignore[method-assign]

    original = utils.get_current_backend

    def get_current_backend(device_type: str | None = None) -> str:
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == _NAME else original(device_type)

    utils.get_current_backend = get_current_backend
    common.get_current_backend = get_current_backend  # imported by name there


_registered = False


def register() -> None:
    """Register openreg's backend with Inductor (idempotent)."""
    global _registered
    if _registered:
        return
    _teach_inductor_cpp_devices()
    register_device_op_overrides(_NAME, OpenRegDeviceOpOverrides())
    register_backend_for_device(_NAME, OpenRegScheduling, OpenRegWrapperCodegen)
    _registered = True
