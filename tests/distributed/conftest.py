"""Fixtures of the distributed session's tests (helpers live in _launch.py)."""

from __future__ import annotations

from _launch import hosts, launch

__all__ = ["hosts", "launch"]
