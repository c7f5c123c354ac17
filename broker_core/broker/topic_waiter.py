"""Waiting for new messages in any of a few topics (long polling for POP receives).

The store's dispatch thread calls :meth:`TopicWaiter.notify` for every queue it grows; a
receiver that found nothing notes the topics' generations, then waits until one of them
moves or its time runs out — it never polls on a timer.

Each wait is counted under the waiter's name (the consumer group): :meth:`parked` tells
how many receives wait now and how many waits began in all. A wait is counted only when
nothing was dispatched to its topics since the caller noted their generations (before
it looked for messages), so each counted wait is the broker saying "I looked after every
message dispatched so far and found nothing for this group" (Health shows both; tests
await them instead of sleeping).

Threads: ``notify`` runs on the dispatch thread; ``generation``/``wait`` on any thread.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence


class TopicWaiter:
    """Per-topic generation counters with one condition to wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generations: dict[str, int] = {}
        self._waiting = 0
        self._closed = False
        self._parked_now: Counter[str] = Counter()
        self._parked_total: Counter[str] = Counter()

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: ``topic`` has new messages."""
        with self._cond:
            self._generations[topic] = self._generations.get(topic, 0) + 1
            if self._waiting:
                self._cond.notify_all()

    def generation(self, topics: Sequence[str]) -> tuple[int, ...]:
        with self._cond:
            return self._current(topics)

    def wait(
        self, topics: Sequence[str], seen: tuple[int, ...], timeout_ms: int, who: str = ""
    ) -> bool:
        """Block until a topic's generation differs from ``seen``; False on timeout."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            if self._current(topics) != seen:
                return True  # dispatched since the caller looked: not a park
            self._waiting += 1
            self._parked_now[who] += 1
            self._parked_total[who] += 1
            try:
                while not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                    if self._current(topics) != seen:
                        return True
                return False
            finally:
                self._waiting -= 1
                self._parked_now[who] -= 1
                if not self._parked_now[who]:
                    del self._parked_now[who]

    def _current(self, topics: Sequence[str]) -> tuple[int, ...]:
        return tuple(self._generations.get(t, 0) for t in topics)

    def parked(self) -> dict[str, dict[str, int]]:
        """``{"now": {who: waiting}, "total": {who: waits begun}}``."""
        with self._cond:
            return {"now": dict(self._parked_now), "total": dict(self._parked_total)}

    def close(self) -> None:
        """Wake every waiter (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
