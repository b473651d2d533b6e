"""Graph lifecycle hooks and the exporters used as hooks (mirrors ``torch.cuda.graphs``'
``register_graph_*_hook``, ``export_dot`` and ``export_graph_data``).

Global hooks run for every graph; a graph's own hooks (``OpenRegGraph.register_*``) run
for that graph only (``capture.py``).
"""

from __future__ import annotations

import itertools
import pickle
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from torch.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from .capture import OpenRegGraph

_Hook: TypeAlias = Callable[["OpenRegGraph"], None]

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


__all__ = [
    "export_dot",
    "export_graph_data",
    "register_graph_capture_end_hook",
    "register_graph_capture_start_hook",
    "register_graph_destroy_hook",
    "register_graph_instantiate_hook",
    "register_graph_replay_end_hook",
    "register_graph_replay_start_hook",
]
