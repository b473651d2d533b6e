"""``make_graphed_callables`` (mirrors ``torch.cuda.make_graphed_callables``): a module's
or function's forward and backward captured into two graphs and replayed by an autograd
Function, with the static tensors they read and write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast, overload

import torch
from torch.utils import _pytree

from ..devices import synchronize
from ..streams import Stream, StreamContext, current_stream
from .capture import GraphPool, OpenRegGraph, _check_mode, _pool_id, graph, graph_pool_handle


class _Captured:
    """One callable's graphs and the static tensors they read and write."""

    def __init__(self, callable_: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> None:
        self.callable = callable_
        self.args = args
        self.parameters: tuple[torch.Tensor, ...] = (
            tuple(callable_.parameters()) if isinstance(callable_, torch.nn.Module) else ()
        )
        # What the graphs read: the sample arguments (copied into at each call)
        # and the module's parameters (the same tensors at every call).
        self.inputs = self.args + self.parameters
        self.forward_graph = OpenRegGraph()
        self.backward_graph = OpenRegGraph()
        self.outputs: tuple[torch.Tensor, ...] = ()
        self.outputs_need_grad: tuple[bool, ...] = ()
        self.output_spec: _pytree.TreeSpec | None = None
        self.grad_outputs: tuple[torch.Tensor | None, ...] = ()
        self.grad_inputs: tuple[torch.Tensor | None, ...] = ()

    def differentiable_inputs(self) -> list[torch.Tensor]:
        return [t for t in self.inputs if t.requires_grad]

    def run_eagerly(self) -> tuple[list[torch.Tensor], _pytree.TreeSpec]:
        outputs, spec = _pytree.tree_flatten(self.callable(*self.args))
        return [cast(torch.Tensor, o) for o in outputs], spec

    def backward(
        self,
        outputs: Sequence[torch.Tensor],
        grad_outputs: Sequence[torch.Tensor | None],
        allow_unused: bool,
    ) -> tuple[torch.Tensor | None, ...]:
        differentiable = [o for o in outputs if o.requires_grad]
        inputs = self.differentiable_inputs()
        if not differentiable or not inputs:
            return tuple(None for _ in self.inputs)
        grads = iter(
            torch.autograd.grad(
                differentiable,
                inputs,
                grad_outputs=[g for g in grad_outputs if g is not None],
                only_inputs=True,
                allow_unused=allow_unused,
            )
        )
        return tuple(next(grads) if t.requires_grad else None for t in self.inputs)


def _check_graphable(callables: tuple[Any, ...], sample_args: tuple[Any, ...]) -> None:
    if torch.is_autocast_enabled("openreg") and torch.is_autocast_cache_enabled():
        raise RuntimeError(
            "make_graphed_callables does not support the autocast weight cache: use "
            "torch.autocast('openreg', cache_enabled=False)"
        )
    if len(callables) != len(sample_args):
        raise ValueError(
            f"make_graphed_callables: {len(callables)} callables but {len(sample_args)} tuples of "
            "sample arguments; pass one tuple of tensors per callable"
        )
    for index, (func, args) in enumerate(zip(callables, sample_args, strict=True)):
        if not callable(func):
            raise TypeError(f"make_graphed_callables: callable {index} is not callable: {func!r}")
        if not isinstance(args, tuple) or not all(isinstance(a, torch.Tensor) for a in args):
            raise TypeError(
                f"make_graphed_callables: the sample arguments of callable {index} must be a "
                "tuple of tensors"
            )
        if isinstance(func, torch.nn.Module):
            hooks = (func._backward_hooks, func._forward_hooks, func._forward_pre_hooks)
            if any(len(h) for h in hooks):
                raise RuntimeError(
                    f"make_graphed_callables: module {index} has hooks registered; graphed "
                    "modules cannot run hooks (remove them, or graph the module without them)"
                )
            if any(b.requires_grad for b in func.buffers()):
                raise RuntimeError(
                    f"make_graphed_callables: module {index} has buffers that require grad; "
                    "only parameters may require grad"
                )
        for arg in args:
            if arg.device.type != "openreg":
                raise ValueError(
                    f"make_graphed_callables: sample arguments must be openreg tensors; callable "
                    f"{index} got one on {arg.device}"
                )


def _warm_up(captured: list[_Captured], iterations: int, allow_unused: bool) -> None:
    """Runs each callable's forward and backward on a side stream: the first call of each
    operator signature plans it synchronously, which a capture cannot record."""
    side = Stream()
    side.wait_stream(current_stream())
    with StreamContext(side):
        for entry in captured:
            for _ in range(iterations):
                outputs, _ = entry.run_eagerly()
                grad_outputs = [torch.empty_like(o) if o.requires_grad else None for o in outputs]
                entry.backward(outputs, grad_outputs, allow_unused)
                del outputs, grad_outputs
    current_stream().wait_stream(side)


def _graphed_function(entry: _Captured) -> Callable[..., Any]:
    """An autograd Function that replays ``entry``'s graphs, and a callable applying it."""

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            for static, given in zip(entry.inputs, inputs, strict=True):
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            entry.forward_graph.replay()
            return tuple(o.detach() for o in entry.outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
            for static, given, needed in zip(
                entry.grad_outputs, grads, entry.outputs_need_grad, strict=True
            ):
                if not needed or static is None:
                    continue
                if given is None:
                    static.zero_()
                elif static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            entry.backward_graph.replay()
            return tuple(g.detach() if g is not None else None for g in entry.grad_inputs)

    def run(*args: Any) -> Any:
        flat, _ = _pytree.tree_flatten(args)
        if len(flat) != len(entry.args):
            raise TypeError(
                f"graphed callable: expected {len(entry.args)} tensor arguments (as the sample "
                f"arguments), got {len(flat)}"
            )
        outputs = Graphed.apply(*(tuple(flat) + entry.parameters))
        assert entry.output_spec is not None
        return _pytree.tree_unflatten(list(outputs), entry.output_spec)

    return run


@overload
def make_graphed_callables(
    callables: torch.nn.Module | Callable[..., Any],
    sample_args: tuple[torch.Tensor, ...],
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: GraphPool | None = None,
    capture_error_mode: str = "global",
) -> Any: ...


@overload
def make_graphed_callables(
    callables: tuple[Any, ...],
    sample_args: tuple[tuple[torch.Tensor, ...], ...],
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: GraphPool | None = None,
    capture_error_mode: str = "global",
) -> tuple[Any, ...]: ...


def make_graphed_callables(
    callables: Any,
    sample_args: Any,
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: GraphPool | None = None,
    capture_error_mode: str = "global",
) -> Any:
    """Graphed versions of functions or modules: forward and backward each replay a graph
    (mirrors ``torch.cuda.make_graphed_callables``).

    Each graphed callable runs its forward work as one graph inside one autograd node, whose
    backward runs the backward work as another graph, so it drops into a training loop. The
    callables' graphs share one memory pool; pass several callables in the order they run.
    Arguments must have the sample arguments' shapes, dtypes and devices; a module's graphs
    run only in the training state it was in when graphed (otherwise its original forward
    runs). Outputs and gradients are the graphs' static tensors, overwritten by the next call.

    Args:
        callables: a function or module, or a tuple of them.
        sample_args: a tuple of tensors (a tuple of such tuples for a tuple of callables).
        num_warmup_iters: eager iterations before capture (at least 1: openreg plans each new
            operator signature synchronously, which a capture cannot record).
        allow_unused_input: allow inputs that do not affect the outputs.
        pool: the memory pool to capture into (default: a new one shared by all callables).
        capture_error_mode: see :meth:`OpenRegGraph.capture_begin`.
    """
    single = not isinstance(callables, tuple)
    all_callables: tuple[Any, ...] = (callables,) if single else callables
    all_args: tuple[Any, ...] = (sample_args,) if single else sample_args
    _check_graphable(all_callables, all_args)
    if num_warmup_iters < 1:
        raise ValueError(
            f"make_graphed_callables: num_warmup_iters must be at least 1, got {num_warmup_iters}: "
            "each new operator signature runs synchronously once, which a capture cannot record"
        )
    mode = _check_mode(capture_error_mode)
    captured = [_Captured(func, args) for func, args in zip(all_callables, all_args, strict=True)]
    synchronize()
    _warm_up(captured, num_warmup_iters, allow_unused_input)
    synchronize()

    shared_pool = graph_pool_handle() if pool is None else _pool_id(pool)
    # Forwards in the order they run, then backwards in reverse, as a training step runs them:
    # each capture may then reuse the pool memory that the earlier ones freed.
    for entry in captured:
        with graph(entry.forward_graph, pool=shared_pool, capture_error_mode=mode):
            outputs, entry.output_spec = entry.run_eagerly()
        entry.outputs = tuple(outputs)
    for entry in reversed(captured):
        entry.grad_outputs = tuple(
            torch.empty_like(o) if o.requires_grad else None for o in entry.outputs
        )
        with graph(entry.backward_graph, pool=shared_pool, capture_error_mode=mode):
            entry.grad_inputs = entry.backward(
                entry.outputs, entry.grad_outputs, allow_unused_input
            )
        # The captured autograd graph is spent: dropping it lets later backwards create their
        # gradient accumulators on the streams they run on, not on the capture stream.
        entry.outputs_need_grad = tuple(o.requires_grad for o in entry.outputs)
        entry.outputs = tuple(o.detach() for o in entry.outputs)

    results = []
    for func, entry in zip(all_callables, captured, strict=True):
        run = _graphed_function(entry)
        if isinstance(func, torch.nn.Module):
            training = func.training
            original = func.forward

            def forward(
                *args: Any,
                _run: Callable[..., Any] = run,
                _original: Callable[..., Any] = original,
                _module: torch.nn.Module = func,
                _training: bool = training,
            ) -> Any:
                return _run(*args) if _module.training == _training else _original(*args)

            func.forward = forward  # type: ignore[method-assign]
            results.append(func)
        else:
            results.append(run)
    return results[0] if single else tuple(results)


__all__ = ["make_graphed_callables"]
