"""Where the sink's rows go: the brokers of a topic, and which row goes to which of them.

* :func:`spread` (pure) assigns rows to brokers: a row with a message group always goes
  to the same broker (a stable hash of the group over the brokers, sorted by name), where
  the broker pins the group to one queue (FIFO); other rows go round robin, continuing
  from where the previous request stopped, so a task's rows spread evenly over every
  broker and each broker spreads them over its queues.
* :class:`SinkTargets` holds one client per broker for a task (or for the driver's
  commit), opened lazily and closed together.

>>> spread(3, 7, None, start=1)
[[2, 5], [0, 3, 6], [1, 4]]
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Final

from broker_core.client import RocketMQClient
from broker_core.errors import ConfigError

WRITE_PERM: Final = 2  # RocketMQ's PermName.PERM_WRITE


def stable_index(group: str, brokers: int) -> int:
    """The broker (0 .. brokers-1) of a message group; the same in every process."""
    return zlib.crc32(group.encode("utf-8")) % brokers


def spread(brokers: int, rows: int, message_groups: Sequence[str | None] | None, *,
           start: int) -> list[list[int]]:  # fmt: skip
    """Row numbers per broker, each list in row order (see the module docstring).

    ``start`` is the round-robin position of row 0 (a counter the caller keeps).
    """
    if brokers < 1:
        raise ValueError(f"brokers must be >= 1, got {brokers}")
    out: list[list[int]] = [[] for _ in range(brokers)]
    for row in range(rows):
        group = message_groups[row] if message_groups is not None else None
        index = stable_index(group, brokers) if group else (start + row) % brokers
        out[index].append(row)
    return out


class SinkTargets:
    """The sink's brokers: one client per endpoint, shared by every topic.

    Thread-compatible, not thread-safe: one per task. ``clients(topic)`` is the list
    :func:`spread`'s indexes refer to, in a stable order (sorted by endpoint).
    """

    def __init__(self, endpoints: Sequence[str], *, timeout_s: float) -> None:
        if not endpoints:
            raise ConfigError("option 'endpoints': at least one broker is required")
        self._clients = [RocketMQClient(e, timeout_s=timeout_s) for e in sorted(endpoints)]

    def clients(self, topic: str) -> list[RocketMQClient]:
        """The clients of the brokers ``topic``'s rows are spread over."""
        del topic  # every endpoint given serves every topic (it auto-creates or refuses)
        return self._clients

    def close(self) -> None:
        for client in self._clients:
            client.close()
