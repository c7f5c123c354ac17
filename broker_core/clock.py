"""The project's two clocks, in milliseconds.

``now_ms`` is wall time (what stored messages, timers and offsets-by-time use; it can step
when the host's clock is set). ``monotonic_ms`` never goes backwards (what deadlines,
expiries and long-poll waits use). Services take either as a ``clock_ms`` argument so tests
can drive time; these are the defaults.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock that never goes backwards (its zero is arbitrary)."""
    return time.monotonic_ns() // 1_000_000
