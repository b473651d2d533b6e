"""Streams and events of openreg devices (mirrors torch.cuda.streams).

``Stream`` and ``Event`` are the device-generic ``torch.Stream`` /
``torch.Event`` specialised to openreg, so they work wherever PyTorch takes a
stream or an event (``torch.accelerator``, ``with stream:``,
``Tensor.record_stream``).
"""

from __future__ import annotations

from types import TracebackType

import torch

from .. import _C
from ._fork import _lazy_init
from ._utils import DeviceLike, _get_device_index


class Stream(torch.Stream):
    """An openreg stream: work on it runs in order, asynchronously to the host.

    Args:
        device: the openreg device (default: the current one).
        priority: 0 (default, least) to -2 (greatest); lower is higher, as in CUDA.
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: int) -> Stream:
        _lazy_init()  # a stream of the parent's device cannot run anything in a forked child
        if {"stream_id", "device_index", "device_type"} <= kwargs.keys():
            return super().__new__(cls, **kwargs)
        index = _get_device_index(device, optional=True)
        return super().__new__(cls, device=torch.device("openreg", index), priority=priority)

    @property
    def priority(self) -> int:
        """This stream's priority."""
        return _C._stream_priority(self.stream_id, self.device_index)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(least, greatest) stream priority: (0, -2)."""
        return _C._stream_priority_range()

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        """Record ``event`` (a new openreg Event if None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __repr__(self) -> str:
        device = f"openreg:{self.device_index}"
        return f"<torch.openreg.Stream device={device} stream_id={self.stream_id}>"


class Event(torch.Event):
    """An openreg event: marks a point in a stream's work (mirrors torch.cuda.Event)."""

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        if interprocess:
            raise NotImplementedError(
                "openreg events cannot be shared between processes (interprocess=True); "
                "synchronize in the process that records the event"
            )
        _lazy_init()
        return super().__new__(
            cls,
            device=torch.device("openreg"),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, timing-enabled)."""
        # torch.Event.elapsed_time only accepts exact torch.Event instances.
        return _C._event_elapsed_time(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        return f"<torch.openreg.Event event_id={self.event_id}>"


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(
        stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
    )


def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on ``device``."""
    return _wrap(torch.accelerator.current_stream(_get_device_index(device, optional=True)))


def default_stream(device: DeviceLike = None) -> Stream:
    """The default stream of ``device`` (what is current until set_stream)."""
    current = torch.accelerator.current_stream(_get_device_index(device, optional=True))
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device for this thread."""
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager making ``stream`` (and its device) current; None does nothing."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous_device = -1
        self._previous_stream: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        _lazy_init()
        self._previous_device = _C._exchange_device(self.stream.device_index)
        self._previous_stream = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.stream is None or self._previous_stream is None:
            return
        torch.accelerator.set_stream(self._previous_stream)
        _C._exchange_device(self._previous_device)


def stream(stream: torch.Stream | None) -> StreamContext:
    """``with torch.openreg.stream(s):`` runs the block's work on ``s``."""
    return StreamContext(stream)


_MAX_SLEEP_MS = 86_400_000  # one day, as openreg_runtime.Stream.sleep


def _sleep(milliseconds: float, device: DeviceLike = None) -> None:
    """Enqueue a kernel that only waits, on the current stream (like torch.cuda._sleep).

    ``milliseconds`` is a number from 0 to 86400000 (one day); anything else
    (negative, NaN, infinite, huge) is a ValueError.
    """
    if not (0 <= milliseconds <= _MAX_SLEEP_MS):  # also false for NaN
        raise ValueError(
            f"_sleep: the duration must be a number of milliseconds from 0 to {_MAX_SLEEP_MS} "
            f"(one day), got {milliseconds!r}"
        )
    _C._sleep(_get_device_index(device, optional=True), round(milliseconds * 1000))


__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]
