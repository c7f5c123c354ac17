"""Messages stored per second, for ``rmq cluster list`` (mqadmin clusterList's TPS column).

Nothing is counted on the send path: the total is the sum of every consume queue's
maximum offset (what dispatch has made readable, system topics included), sampled by the
broker's housekeeping and whenever the rate is asked for. The rate is the growth of that
total over the last ``window_s`` seconds (over the samples there are, right after start).

Threads: ``sample`` and ``per_second`` may be called from any thread (one lock).

>>> total = [0]
>>> now = [100.0]
>>> rate = PutRate(lambda: total[0], clock=lambda: now[0], window_s=10)
>>> _ = rate.sample(); total[0] = 500; now[0] = 105.0
>>> rate.per_second()
100.0
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class PutRate:
    """The growth per second of a monotonic total, over a sliding window of samples."""

    def __init__(
        self,
        total: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 10.0,
    ) -> None:
        self._total = total
        self._clock = clock
        self._window_s = window_s
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque()

    def sample(self) -> tuple[float, int]:
        """Take a sample now; forget those no longer needed for the window."""
        now, total = self._clock(), self._total()
        with self._lock:
            self._samples.append((now, total))
            while len(self._samples) > 2 and self._samples[1][0] <= now - self._window_s:
                self._samples.popleft()  # the second is old enough to serve as the base
            return now, total

    def per_second(self) -> float:
        """Messages per second over the window (0.0 with a single sample)."""
        now, total = self.sample()
        with self._lock:
            then, base = self._samples[0]
        return 0.0 if now <= then else round((total - base) / (now - then), 1)


def stored_total(snapshot: Callable[[], tuple[int, dict[str, dict[str, list[int]]]]]) -> int:
    """Sum of every queue's maximum offset in a dispatcher snapshot."""
    _, table = snapshot()
    return sum(bounds[1] for queues in table.values() for bounds in queues.values())
