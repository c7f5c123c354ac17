"""Waiting for new messages in any of a few topics (long polling for POP receives).

The store's dispatch thread calls :meth:`TopicWaiter.notify` for every queue it grows; a
receiver that found nothing notes the topics' generations, then waits until one of them
moves or its time runs out — it never polls on a timer.

Threads: ``notify`` runs on the dispatch thread; ``generation``/``wait`` on any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence


class TopicWaiter:
    """Per-topic generation counters with one condition to wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generations: dict[str, int] = {}
        self._waiting = 0
        self._closed = False

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: ``topic`` has new messages."""
        with self._cond:
            self._generations[topic] = self._generations.get(topic, 0) + 1
            if self._waiting:
                self._cond.notify_all()

    def generation(self, topics: Sequence[str]) -> tuple[int, ...]:
        with self._cond:
            return tuple(self._generations.get(t, 0) for t in topics)

    def wait(self, topics: Sequence[str], seen: tuple[int, ...], timeout_ms: int) -> bool:
        """Block until a topic's generation differs from ``seen``; False on timeout."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            self._waiting += 1
            try:
                while not self._closed:
                    if tuple(self._generations.get(t, 0) for t in topics) != seen:
                        return True
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                return False
            finally:
                self._waiting -= 1

    def close(self) -> None:
        """Wake every waiter (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
