"""Shared by the schedule and timer tests: a base time and a settable clock."""

from __future__ import annotations

T0 = 1_700_000_000_000
S = 1_000


class Clock:
    """A settable clock shared by the store and the service."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms
