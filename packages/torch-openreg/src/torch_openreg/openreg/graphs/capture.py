"""Capturing a stream's work into a graph and replaying it: ``OpenRegGraph`` (for
``torch.cuda.CUDAGraph``), the ``graph`` context manager, graph pools and
``is_current_stream_capturing``. Design: ``docs/graphs.md``.
"""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict
from types import TracebackType
from typing import Any, ClassVar, TypeAlias, cast

import torch
from torch.utils.hooks import RemovableHandle

from ... import _C
from ..devices import current_device, synchronize
from ..memory import MemPool, empty_cache
from ..streams import Stream, StreamContext
from .hooks import _destroyed, _global_hooks, _graph_ids, _Hook, _register, _run_global

PoolHandle: TypeAlias = tuple[int, int]
GraphPool: TypeAlias = PoolHandle | MemPool
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


__all__ = ["OpenRegGraph", "graph", "graph_pool_handle", "is_current_stream_capturing"]
