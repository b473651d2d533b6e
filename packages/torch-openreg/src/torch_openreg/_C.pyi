"""
Native part of torch_openreg (use torch.openreg instead).
"""

from __future__ import annotations

import datetime
import typing

import torch
import torch._C._distributed_c10d

__all__: list[str] = list()

class _CompiledKernel:
    """
    A kernel Inductor compiled for openreg; calling it enqueues it on the current stream of its arguments' device.
    """
    def __call__(self, *args: typing.Any) -> None: ...
    def __init__(
        self, name: str, entry: typing.SupportsInt | typing.SupportsIndex, kinds: str
    ) -> None: ...
    @property
    def kinds(self) -> str: ...
    @property
    def name(self) -> str: ...

class _MemPool:
    """
    A private memory pool of the openreg caching allocator.
    """
    def __init__(self, use_on_oom: bool = False, no_split: bool = False) -> None: ...
    @property
    def id(self) -> tuple[int, int]:
        """
        The pool's id, (0, n).
        """
    @property
    def device(self) -> int:
        """
        The openreg device that was current when the pool was created.
        """
    def use_count(self) -> int:
        """
        MemPool objects and use_mem_pool scopes using the pool.
        """
    def _begin_allocate(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...
    def _end_allocate(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...

class _OpenRegGraph:
    """
    An openreg graph: capture, instantiate, replay.
    """
    def __init__(self, keep_graph: bool = False) -> None: ...
    def capture_begin(
        self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global"
    ) -> None:
        """
        Begin capturing the current stream's work (not the default stream).
        """
    def capture_end(self) -> None:
        """
        End the capture begun on the current stream.
        """
    def instantiate(self) -> None:
        """
        Make the captured graph replayable.
        """
    def replay(self) -> None:
        """
        Enqueue the captured work on the current stream.
        """
    def reset(self) -> None:
        """
        Forget the graph and release its memory pool.
        """
    def pool(self) -> tuple[int, int]:
        """
        The id of the graph's memory pool, (n, 0) or a MemPool's (0, n).
        """
    def enable_debug_mode(self) -> None:
        """
        Keep the captured graph after instantiation, for debug_dump.
        """
    def debug_dump(self, debug_path: str) -> None:
        """
        Write the kept graph to a file in Graphviz DOT.
        """
    @property
    def _has_graph_exec(self) -> bool:
        """
        Whether replay() can run without instantiating first.
        """
    def _graph_data(self) -> dict | None:
        """
        The captured graph's nodes and edges (None before capture_end).
        """
    def _dot(self) -> str | None:
        """
        The captured graph in Graphviz DOT (None before capture_end).
        """

class _StreamHold:
    """
    Test hook: work that holds an openreg stream until released (tests/_async.py's held_stream).
    """
    def __init__(
        self,
        stream_id: typing.SupportsInt | typing.SupportsIndex,
        device: typing.SupportsInt | typing.SupportsIndex,
        limit_seconds: typing.SupportsFloat | typing.SupportsIndex,
    ) -> None:
        """
        Queue the hold on the stream `stream_id` of `device`; it lets the stream go by itself after `limit_seconds`, failing that work.
        """
    def release(self) -> None:
        """
        Let the held stream go on.
        """
    def wait_running(self, seconds: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        """
        Wait up to `seconds` for the worker to reach the hold; whether it did.
        """
    @property
    def running(self) -> bool:
        """
        Whether the worker has reached the hold.
        """
    @property
    def released(self) -> bool:
        """
        Whether release() has been called.
        """
    @property
    def expired(self) -> bool:
        """
        Whether the hold let the stream go by itself (never released).
        """

def _abandon_graph_captures() -> list[tuple[int, int]]: ...
def _autocast_policy() -> list[tuple[str, str]]: ...
def _caching_allocator_alloc(
    arg0: typing.SupportsInt | typing.SupportsIndex,
    arg1: typing.SupportsInt | typing.SupportsIndex,
    arg2: typing.SupportsInt | typing.SupportsIndex,
) -> int: ...
def _caching_allocator_delete(arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...
def _check_runtime() -> None: ...
def _create_process_group(
    gloo: torch._C._distributed_c10d.Backend,
    rank: typing.SupportsInt | typing.SupportsIndex,
    size: typing.SupportsInt | typing.SupportsIndex,
    device: typing.SupportsInt | typing.SupportsIndex | None,
    timeout: datetime.timedelta,
) -> torch._C._distributed_c10d.Backend:
    """
    The openreg c10d backend over `gloo` (a ProcessGroupGloo of the same ranks).
    """

def _current_raw_stream(arg0: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    The runtime handle (orStream_t) of the current stream of `device` (-1: the current device).
    """

def _chaos_state() -> tuple[bool, int]: ...
def _chaos_statistics() -> tuple[int, int, int]: ...
def _clear_race_reports() -> None: ...
def _close_for_python_exit() -> None: ...
def _debug_modes() -> str: ...
def _device_count() -> int: ...
def _event_elapsed_time(
    arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex
) -> float: ...
def _event_ipc_handle(event: typing.Any) -> tuple[int, int, int, int, int]: ...
def _event_make_interprocess(
    event: typing.Any, device: typing.SupportsInt | typing.SupportsIndex
) -> None: ...
def _event_open_ipc_handle(event: typing.Any, handle: tuple[int, int, int, int, int]) -> None: ...
def _exchange_device(arg0: typing.SupportsInt | typing.SupportsIndex) -> int: ...
def _exit_with_failure_status() -> None: ...
def _fallback_mode() -> str: ...
def _get_default_generator(arg0: typing.SupportsInt | typing.SupportsIndex) -> typing.Any: ...
def _get_device() -> int: ...
def _get_memory_fraction(arg0: typing.SupportsInt | typing.SupportsIndex) -> float: ...
def _get_sync_debug_mode() -> int: ...
def _graph_pool_handle() -> tuple[int, int]: ...
def _host_record_event(
    arg0: torch.Tensor,
    arg1: typing.SupportsInt | typing.SupportsIndex,
    arg2: typing.SupportsInt | typing.SupportsIndex,
) -> bool: ...
def _host_memory_stats() -> dict: ...
def _init() -> None: ...
def _ipc_collect() -> int: ...
def _ipc_open_storage(
    memory: tuple[int, int, int, int, int, int],
) -> torch.UntypedStorage: ...
def _ipc_share_storage(
    storage: torch.UntypedStorage,
) -> tuple[tuple[int, int, int, int, int, int], tuple[int, int, int, int, int] | None]: ...
def _ipc_wait_event(event: tuple[int, int, int, int, int]) -> None: ...
def _is_current_stream_capturing() -> bool: ...
def _is_initialized() -> bool: ...
def _kernel_allocator_installed() -> bool: ...
def _mark_initialized() -> None: ...
def _mem_get_info(arg0: typing.SupportsInt | typing.SupportsIndex) -> tuple[int, int]: ...
def _memory_snapshot() -> dict: ...
def _output_placement_counts() -> tuple[int, int]: ...
def _race_errors_raise() -> bool: ...
def _race_reports() -> list[str]: ...
def _race_statistics() -> tuple[int, int]: ...
def _reset_race_detector() -> None: ...
def _set_allocator_fault(arg0: str) -> None: ...
def _set_chaos(enabled: bool, seed: typing.SupportsInt | typing.SupportsIndex = 0) -> None: ...
def _set_debug_modes(modes: str) -> None: ...
def _plan_cache_info() -> dict: ...
def _poison_value(dtype: torch.dtype) -> int | float | None: ...
def _private_pool_stats(arg0: typing.SupportsInt | typing.SupportsIndex) -> dict: ...
def _profiler_registered() -> bool: ...
def _register_graph_impl() -> None: ...
def _record_memory_history(
    arg0: bool,
    arg1: bool,
    arg2: str,
    arg3: bool,
    arg4: typing.SupportsInt | typing.SupportsIndex,
    arg5: bool,
) -> None: ...
def _reset_accumulated_host_memory_stats() -> None: ...
def _reset_peak_host_memory_stats() -> None: ...
def _require_lazy_init_after_fork() -> None: ...
def _set_device(arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...
def _set_memory_fraction(
    arg0: typing.SupportsFloat | typing.SupportsIndex,
    arg1: typing.SupportsInt | typing.SupportsIndex,
) -> None: ...
def _set_race_errors_raise(arg0: bool) -> None: ...
def _set_plan_cache_capacity(arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...
def _set_sync_debug_mode(arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...
def _sleep(
    arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex
) -> None: ...
def _stream_priority(
    arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex
) -> int: ...
def _stream_handle(
    arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex
) -> int: ...
def _stream_priority_range() -> tuple[int, int]: ...
def _synchronize(arg0: typing.SupportsInt | typing.SupportsIndex) -> None: ...

_process_group_backend_name: str = "orgloo"
