"""Device memory: statistics, control and the allocator's history (mirrors torch.cuda.memory).

Each public name is declared in the submodule that implements it; this
package's ``__all__`` is theirs together, and so is ``torch.openreg``'s.
"""

from __future__ import annotations

from . import control, history, statistics
from .control import *  # noqa: F403
from .history import *  # noqa: F403
from .history import _dump_snapshot as _dump_snapshot
from .history import _record_memory_history as _record_memory_history
from .history import _snapshot as _snapshot
from .statistics import *  # noqa: F403

__all__ = ["control", "history", "statistics"]
__all__ += control.__all__
__all__ += history.__all__
__all__ += statistics.__all__
