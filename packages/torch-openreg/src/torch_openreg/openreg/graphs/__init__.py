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

from . import capture, graphed_callables, hooks
from .capture import *  # noqa: F403
from .graphed_callables import *  # noqa: F403
from .hooks import *  # noqa: F403

__all__ = capture.__all__ + graphed_callables.__all__ + hooks.__all__
