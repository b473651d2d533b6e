"""Graph capture and replay on openreg (mirrors ``torch.cuda.graphs``).

A graph records the work launched on a stream between ``capture_begin`` and
``capture_end`` without running it; ``replay`` runs it again, reading and
writing the same tensors, for a fraction of the host's cost of launching each
operator. Memory allocated during the capture comes from the graph's private
pool and stays reserved until ``reset``. Design: ``docs/graphs.md``.

From ``torch.cuda.graphs`` this module has ``is_current_stream_capturing``,
``graph_pool_handle``, the graph class (``OpenRegGraph``, for ``CUDAGraph``),
``graph``, ``make_graphed_callables``, ``export_dot``, ``export_graph_data``
and the lifecycle hooks (``register_graph_*_hook``, and the per-graph
``register_*_hook`` methods). It has no ``raw_cuda_graph`` (there is no
driver-level graph object), no kernel annotations and no input liveness
tracking.
"""

from __future__ import annotations

import gc
import itertools
import pickle
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeAlias, cast, overload

import torch
from torch.utils import _pytree
from torch.utils.hooks import RemovableHandle

from .. import _C
from .devices import current_device, synchronize
from .memory import MemPool, empty_cache
from .streams import Stream, StreamContext, current_stream

PoolHandle: TypeAlias = tuple[int, int]
GraphPool: TypeAlias = PoolHandle | MemPool
_Hook: TypeAlias = Callable[["OpenRegGraph"], None]
_CAPTURE_ERROR_MODES = ("default", "global", "thread_local", "relaxed")


def _pool_id(pool: GraphPool | None) -> PoolHandle | None:
    if pool is None:
        return None
    if isinstance(pool, MemPool):
        return cast(PoolHandle, tuple(pool.id))
    if isinstance(pool, tuple) and len(pool) == 2 and all(isinstance(p, int) for p in pool):
        return pool
    raise TypeError(
        "pool must be a graph pool handle (torch.openreg.graph_pool_handle() or another "
        f"graph's pool()), a torch.openreg.MemPool, or None; got {pool!r}"
    )


def _check_mode(capture_error_mode: str) -> str:
    if capture_error_mode not in _CAPTURE_ERROR_MODES:
        raise ValueError(
            "capture_error_mode must be 'global', 'thread_local' or 'relaxed' ('default' is "
            f"'global'), got {capture_error_mode!r}"
        )
    return capture_error_mode


def is_current_stream_capturing() -> bool:
    """True if a graph capture is underway on the current stream of the current device."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> PoolHandle:
    """An opaque id of a new graph memory pool, to share one pool between several captures."""
    return cast(PoolHandle, tuple(_C._graph_pool_handle()))


# ---- Lifecycle hooks (global: every graph; the graph's own: OpenRegGraph.register_*) ----
# A global hook's error is swallowed so that one consumer cannot break another's
# graph; a graph's own hooks are its owner's, and their errors propagate (as torch.cuda).

_global_hooks: dict[str, OrderedDict[int, _Hook]] = {
    name: OrderedDict()
    for name in ("capture_start", "capture_end", "instantiate", "replay_start", "replay_end")
}
_global_destroy_hooks: OrderedDict[int, Callable[[set[int]], None]] = OrderedDict()
_graph_ids = itertools.count(1)


def _register(registry: OrderedDict[int, Any], fn: Callable[..., None]) -> RemovableHandle:
    handle = RemovableHandle(registry)
    registry[handle.id] = fn
    return handle


def _run_global(name: str, graph: OpenRegGraph) -> None:
    for fn in list(_global_hooks[name].values()):
        try:
            fn(graph)
        except Exception:  # a consumer's failure must not break the graph
            pass


def register_graph_capture_start_hook(fn: _Hook) -> RemovableHandle:
    """Run ``fn(graph)`` when any graph's capture begins (the stream captures already:
    work it launches is recorded into the graph)."""
    return _register(_global_hooks["capture_start"], fn)


def register_graph_capture_end_hook(fn: _Hook) -> RemovableHandle:
    """Run ``fn(graph)`` when any graph's capture has ended."""
    return _register(_global_hooks["capture_end"], fn)


def register_graph_instantiate_hook(fn: _Hook) -> RemovableHandle:
    """Run ``fn(graph)`` right after any graph is instantiated."""
    return _register(_global_hooks["instantiate"], fn)


def register_graph_replay_start_hook(fn: _Hook) -> RemovableHandle:
    """Run ``fn(graph)`` before every replay of any graph (keep it cheap)."""
    return _register(_global_hooks["replay_start"], fn)


def register_graph_replay_end_hook(fn: _Hook) -> RemovableHandle:
    """Run ``fn(graph)`` after every replay of any graph is enqueued (also if it raised)."""
    return _register(_global_hooks["replay_end"], fn)


def register_graph_destroy_hook(fn: Callable[[set[int]], None]) -> RemovableHandle:
    """Run ``fn(graph_ids)`` when a graph is reset or collected, with the ids it had."""
    return _register(_global_destroy_hooks, fn)


def _destroyed(graph_ids: set[int]) -> None:
    if not graph_ids:
        return
    for fn in list(_global_destroy_hooks.values()):
        try:
            fn(set(graph_ids))
        except Exception:  # as torch.cuda: one hook must not stop the others
            pass
    graph_ids.clear()


class OpenRegGraph(_C._OpenRegGraph):
    """An openreg graph (mirrors ``torch.cuda.CUDAGraph``).

    Args:
        keep_graph: if False (default), ``capture_end`` instantiates the graph
            at once; if True, ``instantiate`` (or the first ``replay``) does.
            ``debug_dump`` needs ``keep_graph=True`` or ``enable_debug_mode()``.
    """

    def __init__(self, keep_graph: bool = False) -> None:
        super().__init__(keep_graph)
        self._keep_graph = keep_graph
        self.graph_id = 0  # of the current capture; 0 before one
        self._ids: set[int] = set()
        # The graph's ids, for the destroy hooks: fired at reset() or when collected.
        weakref.finalize(self, _destroyed, self._ids)
        self._hooks: dict[str, OrderedDict[int, _Hook]] = {
            name: OrderedDict() for name in _global_hooks
        }

    def _run(self, name: str) -> None:
        _run_global(name, self)
        for hook in list(self._hooks[name].values()):
            hook(self)

    def register_capture_start_hook(self, hook: _Hook) -> RemovableHandle:
        """Run ``hook(self)`` when this graph's capture begins."""
        return _register(self._hooks["capture_start"], hook)

    def register_capture_end_hook(self, hook: _Hook) -> RemovableHandle:
        """Run ``hook(self)`` when this graph's capture has ended (e.g. ``export_dot``)."""
        return _register(self._hooks["capture_end"], hook)

    def register_post_instantiate_hook(self, hook: _Hook) -> RemovableHandle:
        """Run ``hook(self)`` after each instantiation (e.g. ``export_graph_data``)."""
        return _register(self._hooks["instantiate"], hook)

    def register_replay_start_hook(self, hook: _Hook) -> RemovableHandle:
        """Run ``hook(self)`` before every replay."""
        return _register(self._hooks["replay_start"], hook)

    def register_replay_end_hook(self, hook: _Hook) -> RemovableHandle:
        """Run ``hook(self)`` after every replay is enqueued (also if it raised)."""
        return _register(self._hooks["replay_end"], hook)

    def capture_begin(
        self, pool: GraphPool | None = None, capture_error_mode: str = "global"
    ) -> None:
        """Begin capturing the current stream's work (it must not be the default stream).

        Typically called by :class:`graph` or :func:`make_graphed_callables`.

        Args:
            pool: share the memory pool of another graph (its ``pool()``), of
                :func:`graph_pool_handle`, or of a :class:`~torch.openreg.MemPool`.
            capture_error_mode: which threads may make calls that wait for the
                device while capturing: none (``"global"``, the default), all
                but the capturing one (``"thread_local"``), all (``"relaxed"``).
                Waiting for captured work itself is never allowed.
        """
        super().capture_begin(
            pool=_pool_id(pool), capture_error_mode=_check_mode(capture_error_mode)
        )
        self.graph_id = next(_graph_ids)
        self._ids.add(self.graph_id)
        self._run("capture_start")

    def capture_end(self) -> None:
        """End the capture begun on the current stream; instantiates unless ``keep_graph``."""
        super().capture_end()
        self._run("capture_end")
        if not self._keep_graph:
            self._run("instantiate")  # capture_end instantiated it

    def instantiate(self) -> None:
        """Make the captured graph replayable (done by ``capture_end`` or the first replay)."""
        super().instantiate()
        self._run("instantiate")

    def replay(self) -> None:
        """Enqueue the captured work on the current stream."""
        if not self._has_graph_exec and self._dot() is not None:
            self.instantiate()  # keep_graph=True: on the first replay (fires the hooks)
        self._run("replay_start")
        try:
            super().replay()
        finally:
            self._run("replay_end")

    def reset(self) -> None:
        """Forget the captured graph and release its memory pool; the graph can capture again."""
        super().reset()
        _destroyed(self._ids)

    def pool(self) -> PoolHandle:  # type: ignore[override]
        """The id of this graph's memory pool, to share with another capture."""
        return cast(PoolHandle, tuple(super().pool()))

    def debug_dump(self, debug_path: str) -> None:
        """Write the captured graph to ``debug_path`` in Graphviz DOT (needs ``keep_graph=True``
        or ``enable_debug_mode()``; warns otherwise, as torch.cuda does)."""
        super().debug_dump(debug_path)

    def get_graph_data(self) -> dict[str, Any]:
        """The captured graph's nodes (index, node_type "kernel" or "memcpy", name,
        stream_id, dependencies, dependents) and edges (from, to)."""
        data = self._graph_data()
        if data is None:
            raise RuntimeError(
                "get_graph_data: this graph holds no captured graph (capture first; reset() "
                "forgets it)"
            )
        return cast(dict[str, Any], data)


def export_dot(path: str) -> _Hook:
    """A capture-end hook writing the captured graph to ``path`` in Graphviz DOT
    (``graph.register_capture_end_hook(export_dot("g.dot"))``)."""

    def _hook(graph: OpenRegGraph) -> None:
        dot = graph._dot()
        if dot is None:
            raise RuntimeError("export_dot: the graph holds no captured graph")
        with open(path, "w") as file:
            file.write(dot)

    return _hook


def export_graph_data(path: str) -> _Hook:
    """A post-instantiate hook pickling ``graph.get_graph_data()`` to ``path``."""

    def _hook(graph: OpenRegGraph) -> None:
        with open(path, "wb") as file:
            pickle.dump(graph.get_graph_data(), file)

    return _hook


class graph:
    """Context manager capturing the block's openreg work into ``openreg_graph``
    (mirrors ``torch.cuda.graph``).

    Entering synchronizes the device, releases the allocator's cache and makes
    the capture stream current (``stream``, or one side stream per device kept
    by this class); leaving ends the capture. If the block raises, the capture
    is ended and the block's exception propagates (a capture left invalid by it
    does not replace it with capture_end's error).

    Args:
        openreg_graph: the :class:`OpenRegGraph` to capture into.
        pool: a pool to share (see :meth:`OpenRegGraph.capture_begin`).
        stream: the capture stream (not a default stream).
        capture_error_mode: ``"global"`` (default), ``"thread_local"`` or ``"relaxed"``.
    """

    _default_capture_streams: ClassVar[dict[int, Stream]] = {}

    def __init__(
        self,
        openreg_graph: OpenRegGraph,
        pool: GraphPool | None = None,
        stream: torch.Stream | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        if stream is None:
            device = current_device()
            stream = self._default_capture_streams.setdefault(device, Stream(device))
        self.openreg_graph = openreg_graph
        self.pool = _pool_id(pool)
        self.capture_stream = stream
        self.capture_error_mode = _check_mode(capture_error_mode)
        self.stream_ctx = StreamContext(stream)

    def __enter__(self) -> None:
        synchronize()
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.openreg_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self.openreg_graph.capture_end()
            else:
                try:
                    self.openreg_graph.capture_end()
                except RuntimeError:
                    pass  # the block's own exception, propagating, is the cause
        finally:
            self.stream_ctx.__exit__(exc_type, exc_value, traceback)


# ---- make_graphed_callables ------------------------------------------------------------


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


__all__ = [
    "OpenRegGraph",
    "export_dot",
    "export_graph_data",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
    "register_graph_capture_end_hook",
    "register_graph_capture_start_hook",
    "register_graph_destroy_hook",
    "register_graph_instantiate_hook",
    "register_graph_replay_end_hook",
    "register_graph_replay_start_hook",
]
