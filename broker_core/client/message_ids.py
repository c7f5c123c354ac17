"""Message ids for batches written as bytes (``wire``, ``bulk``), shaped as
``broker_core.message.new_message_id`` shapes them, reserved a block at a time.

Thread-safe: one lock guards the process's counter (:data:`ID_BLOCKS`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Final

MESSAGE_ID_CHARS: Final = 34


class IdBlocks:
    """Message ids as ``new_message_id`` shapes them, handed out a batch at a time.

    ``"01"`` + 12 random hex + 4 hex pid + 8 hex epoch ms + 8 hex sequence (34 chars).
    The random part is drawn per process (again after a fork, so a forked worker
    never repeats its parent's ids); within a process the sequence makes ids unique.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._prefix = b""
        self._next_seq = 0
        self._fixed = threading.local()  # .block: [prefix, next sequence] while fixed()

    @contextlib.contextmanager
    def fixed(self, prefix: bytes, first: int) -> Iterator[None]:
        """Ids reserved by this thread inside the block are ``prefix`` (26 chars) and the
        sequence from ``first``: the same ids each time the same rows are sent (the Spark
        sink's idempotent option, so the broker drops a retried task's repeats)."""
        if len(prefix) != MESSAGE_ID_CHARS - 8:
            raise ValueError(f"an id prefix has {MESSAGE_ID_CHARS - 8} chars, got {prefix!r}")
        self._fixed.block = [prefix, first]
        try:
            yield
        finally:
            self._fixed.block = None

    def reserve(self, count: int) -> tuple[bytes, int]:
        """(the ids' first 26 chars, first sequence number) for ``count`` ids."""
        block = getattr(self._fixed, "block", None)
        if block is not None:
            prefix, first = block
            block[1] = (first + count) & 0xFFFFFFFF
            return prefix, first
        pid = os.getpid()
        with self._lock:
            if pid != self._pid:
                self._pid = pid
                self._prefix = b"01%s%04X" % (os.urandom(6).hex().upper().encode(), pid & 0xFFFF)
            first = self._next_seq
            self._next_seq = (first + count) & 0xFFFFFFFF
        millis = time.time_ns() // 1_000_000 & 0xFFFFFFFF
        return b"%s%08X" % (self._prefix, millis), first


ID_BLOCKS = IdBlocks()  # the process's one id counter


def sequence(first: int, count: int) -> Iterable[int]:
    """The ``count`` sequence numbers from ``first`` (the 32-bit counter wraps)."""
    if first + count <= 0x1_0000_0000:
        return range(first, first + count)
    return [(first + i) & 0xFFFFFFFF for i in range(count)]  # the 32-bit counter wraps
