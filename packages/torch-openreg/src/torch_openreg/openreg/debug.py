"""torch.openreg.debug: a device that catches its users' bugs.

Three modes, switched on by ``OPENREG_DEBUG`` (a comma-separated list, read when
torch_openreg is imported, so child processes inherit it) or by this module:

* ``races``: every kernel, copy and fill is checked against the accesses of other
  streams to the same memory; unordered conflicting accesses (a missing
  ``wait_stream``, a missing ``record_stream``) are reported with both launches'
  Python stacks and the fix. ``OPENREG_DEBUG_RACES=report`` (the default) warns
  and prints a summary at exit; ``error`` raises at the offending call.
* ``poison``: every device allocation (and pinned host allocation) is filled with
  0xFF bytes first, in stream order: NaN in the float types, the maximum of the
  unsigned ones. Where the dtype is known (``torch.empty`` and the other openreg
  factories), signed integers get a value no data holds instead (the type's
  minimum; see :func:`poison_value`), so indexing with them raises and sums of
  them are far from any plausible value. Code that reads memory nobody wrote
  gives obviously wrong values.
* ``chaos``: stream workers hold and delay work randomly (keeping FIFO order and
  event waits), and non_blocking copies to the host complete only when something
  waits for them, so a missing synchronization gives a wrong value. Seeded by
  ``OPENREG_DEBUG_SEED`` (printed when the mode starts, to replay a failure).

See docs/debug-modes.md for the model and its costs.
"""

from __future__ import annotations

import atexit
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch

from .. import _C

MODES = ("races", "poison", "chaos")
RACE_ACTIONS = ("report", "error")
# Chaos seeds are the runtime's: unsigned 64-bit, 0 meaning "choose one".
_MAX_SEED = 2**64 - 1


def _normalized(modes: Iterable[str]) -> frozenset[str]:
    chosen = frozenset(modes)
    unknown = sorted(chosen - set(MODES))
    if unknown:
        raise ValueError(
            f"unknown openreg debug mode(s) {', '.join(map(repr, unknown))}: "
            f"choose from {', '.join(map(repr, MODES))}"
        )
    return chosen


def get_modes() -> frozenset[str]:
    """The debug modes that are on, e.g. ``frozenset({'races', 'poison'})``."""
    names = _C._debug_modes()
    return frozenset(names.split(",")) if names else frozenset()


def set_modes(*modes: str) -> None:
    """Turn on exactly ``modes`` (any of ``'races'``, ``'poison'``, ``'chaos'``).

    Race detection switched on starts from a clean slate: what ran while it was
    off is not known, so it is not checked. Chaos is seeded with
    ``OPENREG_DEBUG_SEED`` or, without it, a seed chosen now and printed.
    """
    chosen = _normalized(modes)
    _C._set_debug_modes(",".join(m for m in MODES if m in chosen))
    _set_chaos("chaos" in chosen)


def enable(*modes: str) -> None:
    """Turn ``modes`` on, leaving the others as they are."""
    set_modes(*(get_modes() | _normalized(modes)))


def disable(*modes: str) -> None:
    """Turn ``modes`` off, leaving the others as they are."""
    set_modes(*(get_modes() - _normalized(modes)))


@contextmanager
def enabled(*modes: str, races: str | None = None) -> Iterator[None]:
    """Context manager: ``modes`` on inside the block, the previous modes after.

    ``races`` optionally sets what a race does inside the block (``'report'`` or
    ``'error'``)::

        with torch.openreg.debug.enabled("races", "poison", races="error"):
            run_my_code()
    """
    previous_modes = get_modes()
    previous_action = get_race_action()
    set_modes(*(previous_modes | _normalized(modes)))
    if races is not None:
        set_race_action(races)
    try:
        yield
    finally:
        set_race_action(previous_action)
        set_modes(*previous_modes)


def get_race_action() -> str:
    """``'report'`` (warn, and summarise at exit) or ``'error'`` (raise at the call)."""
    return "error" if _C._race_errors_raise() else "report"


def set_race_action(action: str) -> None:
    """Choose what a detected race does: ``'report'`` or ``'error'``."""
    if action not in RACE_ACTIONS:
        raise ValueError(f"race action must be one of {RACE_ACTIONS}, got {action!r}")
    _C._set_race_errors_raise(action == "error")


def race_reports() -> list[str]:
    """The text of the races reported so far (the last 100), oldest first."""
    return list(_C._race_reports())


def race_report_count() -> int:
    """How many races were reported since the start (or the last clear)."""
    return int(_C._race_statistics()[0])


def clear_race_reports() -> None:
    """Forget the reports so far (the count restarts at 0)."""
    _C._clear_race_reports()


def poison_mask(tensor: torch.Tensor) -> torch.Tensor:
    """Boolean tensor (on ``tensor``'s device): which elements hold the poison pattern.

    An element is poisoned when every one of its bytes is 0xFF, the fill of
    ``OPENREG_DEBUG=poison`` (NaN for floats, the maximum of unsigned integers),
    or when it holds the value :func:`poison_value` gives for its dtype, which
    the openreg factories (``torch.empty`` and the like) write instead.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"poison_mask expects a tensor, got {type(tensor).__name__}")
    if tensor.is_complex() or tensor.dtype == torch.bool or tensor.is_quantized:
        bytes_per_element = tensor.element_size()
        raw = tensor.detach().contiguous().view(-1).view(torch.uint8).reshape(-1, bytes_per_element)
        return raw.eq(255).all(dim=1).reshape(tensor.shape)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    raw = tensor.detach().contiguous().view(bits)
    all_ones = 255 if bits == torch.uint8 else -1
    mask = raw.eq(all_ones)
    typed = poison_value(tensor.dtype)
    if typed is None:
        return mask
    # NaN for the float8 types whose only NaN is the poison: any NaN matches.
    holds_typed = tensor.detach().isnan() if typed != typed else tensor.detach().eq(typed)
    return mask | holds_typed.reshape(mask.shape)


def poison_value(dtype: torch.dtype) -> int | float | None:
    """What a poisoned element of ``dtype`` holds when the dtype was known at allocation.

    ``torch.empty`` and the other openreg factories give signed integers a value
    no data holds (the type's minimum; for int64, whose minimum would sum to 0,
    -7046029254386353131), and the float8 types whose 0xFF byte is a number
    their NaN. None when the 0xFF bytes of every poisoned allocation already are
    such a value. docs/debug-modes.md lists every dtype.
    """
    return _C._poison_value(dtype)


def is_poisoned(tensor: torch.Tensor) -> bool:
    """True if any element of ``tensor`` holds the poison pattern (all bytes 0xFF)."""
    return bool(poison_mask(tensor).any())


def chaos_seed() -> int | None:
    """The seed of chaos scheduling, or None while the mode is off."""
    enabled_now, seed = _C._chaos_state()
    return seed if enabled_now else None


def chaos_statistics() -> dict[str, int]:
    """What chaos scheduling did in this process so far.

    ``holds``: pieces of work held until something waited for them;
    ``expired_holds``: of those, how many ran at their cap (1 s) because nothing
    the device could see waited for them; ``expired_turns``: waits for a turn in
    launch order that gave up at the cap. Expirations make a run slow and weaken
    the guarantee: the program waits for the device in a way openreg cannot see.
    """
    holds, expired_holds, expired_turns = _C._chaos_statistics()
    return {"holds": holds, "expired_holds": expired_holds, "expired_turns": expired_turns}


def set_chaos_seed(seed: int) -> None:
    """Re-seed chaos scheduling (to replay a run whose seed was printed).

    The same seed holds the same work on every run of the same program.
    """
    if "chaos" not in get_modes():
        raise RuntimeError(
            "chaos scheduling is off: enable it first (torch.openreg.debug.enable('chaos'))"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 1 <= seed <= _MAX_SEED:
        raise ValueError(
            f"the chaos seed must be an integer from 1 to {_MAX_SEED} (the seed a chaos run "
            f"printed), got {seed!r}"
        )
    _C._set_chaos(True, seed)
    _announce_seed()


def _seed_from_text(text: str, source: str) -> int:
    """A chaos seed written as text (``source`` names where), by OPENREG_DEBUG_SEED's rule.

    Decimal digits only, 1 to 2**64 - 1, as the runtime reads OPENREG_DEBUG_SEED:
    ``int()`` would also take " -5", "+5" and "1_000", and a seed that replays a run
    must not silently become another one.
    """
    digits = text.isascii() and text.isdigit()
    # (the length check first: int() refuses strings of thousands of digits)
    if not digits or len(text.lstrip("0")) > len(str(_MAX_SEED)) or not 1 <= int(text) <= _MAX_SEED:
        raise ValueError(
            f"{source}={text!r} is invalid: give a decimal integer from 1 to {_MAX_SEED}, "
            "digits only (no sign, spaces or prefix), such as the seed a chaos run printed"
        )
    return int(text)


def _set_chaos(on: bool) -> None:
    was_on, _ = _C._chaos_state()
    _C._set_chaos(on)
    if on and not was_on:
        _announce_seed()


def _announce_seed() -> None:
    seed = _C._chaos_state()[1]
    print(
        f"openreg: chaos scheduling with seed {seed} (replay with OPENREG_DEBUG_SEED={seed})",
        file=sys.stderr,
    )


def _summary_at_exit() -> None:
    count = race_report_count()
    if count == 0:
        return
    reports = race_reports()
    print(
        f"\nopenreg: {count} stream race(s) reported in this process (OPENREG_DEBUG=races). "
        f"The first one kept:\n{reports[0] if reports else ''}",
        file=sys.stderr,
    )


def _start() -> None:
    """Called once at import: announce chaos and summarise races at exit."""
    if "chaos" in get_modes():
        _announce_seed()
    atexit.register(_summary_at_exit)


__all__ = [
    "MODES",
    "chaos_seed",
    "chaos_statistics",
    "clear_race_reports",
    "disable",
    "enable",
    "enabled",
    "get_modes",
    "get_race_action",
    "is_poisoned",
    "poison_mask",
    "poison_value",
    "race_report_count",
    "race_reports",
    "set_chaos_seed",
    "set_modes",
    "set_race_action",
]
