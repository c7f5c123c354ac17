"""Queue allocation strategies for clustering consumers (pure functions, no I/O).

Every consumer of a group runs the same strategy over the same inputs and takes
its own share, so a strategy must be deterministic: inputs are de-duplicated and
sorted inside ``allocate`` and the caller's ordering never matters. A consumer id
that is not in ``all_cids`` gets nothing, and so does everyone when either list
is empty.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from broker_core.errors import ConfigError, InvalidArgumentError


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; sorts by (topic, broker_name, queue_id)."""

    topic: str
    broker_name: str
    queue_id: int

    def __post_init__(self) -> None:
        """Reject a negative or non-integer queue id with InvalidArgumentError."""
        if isinstance(self.queue_id, bool) or not isinstance(self.queue_id, int):
            raise InvalidArgumentError(f"queue_id must be an int, got {self.queue_id!r}")
        if self.queue_id < 0:
            raise InvalidArgumentError(f"queue_id must be >= 0, got {self.queue_id}")


class AllocateStrategy(Protocol):
    """What every allocation strategy offers."""

    name: ClassVar[str]

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """Return the sorted queues ``current_cid`` should consume."""
        ...


def _normalise(
    current_cid: str, all_queues: Iterable[MessageQueue], all_cids: Iterable[str]
) -> tuple[list[MessageQueue], list[str], int] | None:
    """Sort and de-duplicate both lists and find ``current_cid``'s index.

    Returns None when either list is empty or ``current_cid`` is not a member,
    i.e. whenever the caller's share is empty regardless of strategy.
    """
    queues = sorted(set(all_queues))
    cids = sorted(set(all_cids))
    if not queues or current_cid not in cids:
        return None
    return queues, cids, cids.index(current_cid)


class AverageStrategy:
    """Contiguous blocks: ``n // m`` queues each, the first ``n % m`` consumers get one more."""

    name: ClassVar[str] = "averagely"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """Return consumer ``i``'s contiguous block; consumers with ``i >= n`` get nothing."""
        prepared = _normalise(current_cid, all_queues, all_cids)
        if prepared is None:
            return []
        queues, cids, index = prepared
        base, extra = divmod(len(queues), len(cids))
        start = index * base + min(index, extra)
        size = base + (1 if index < extra else 0)
        return queues[start : start + size]


class AverageByCircleStrategy:
    """Round robin: consumer ``i`` of ``m`` gets queues ``i, i + m, i + 2m, ...``."""

    name: ClassVar[str] = "averagely_by_circle"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """Return every ``m``-th sorted queue starting at ``current_cid``'s index."""
        prepared = _normalise(current_cid, all_queues, all_cids)
        if prepared is None:
            return []
        queues, cids, index = prepared
        return queues[index :: len(cids)]


def _ring_hash(key: str) -> int:
    """Map ``key`` to a point on a 64-bit ring; stable across processes and platforms."""
    digest = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


def _queue_key(queue: MessageQueue) -> str:
    """The string a queue is hashed by."""
    return f"{queue.topic}@{queue.broker_name}@{queue.queue_id}"


class ConsistentHashStrategy:
    """Hash ring with ``virtual_nodes`` points per consumer; a queue goes to the next point.

    Adding a consumer only moves queues onto the new consumer, and removing one only
    moves that consumer's queues. Shares are not balanced to within one queue.
    """

    name: ClassVar[str] = "consistent_hash"

    def __init__(self, virtual_nodes: int = 10) -> None:
        """Raise ConfigError unless ``virtual_nodes`` is an int in 1..10_000."""
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
            raise ConfigError(f"virtual_nodes must be an int, got {virtual_nodes!r}")
        if not 1 <= virtual_nodes <= 10_000:
            raise ConfigError(f"virtual_nodes must be in 1..10000, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes

    def _ring(self, cids: Sequence[str]) -> tuple[list[int], list[str]]:
        """Build the ring as parallel sorted lists of points and their owners."""
        nodes = sorted(
            (_ring_hash(f"{cid}#{i}"), cid) for cid in cids for i in range(self.virtual_nodes)
        )
        return [point for point, _ in nodes], [cid for _, cid in nodes]

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """Return the sorted queues whose first ring point clockwise belongs to ``current_cid``."""
        prepared = _normalise(current_cid, all_queues, all_cids)
        if prepared is None:
            return []
        queues, cids, _ = prepared
        points, owners = self._ring(cids)
        mine = []
        for queue in queues:
            slot = bisect.bisect_left(points, _ring_hash(_queue_key(queue))) % len(points)
            if owners[slot] == current_cid:
                mine.append(queue)
        return mine


class ConfigStrategy:
    """Explicit assignment: each consumer id gets the queues configured for it."""

    name: ClassVar[str] = "by_config"

    def __init__(self, mapping: Mapping[str, Iterable[MessageQueue]] | None = None) -> None:
        """Copy ``mapping`` (cid -> queues); raise ConfigError if a value is not a queue."""
        self.mapping: dict[str, frozenset[MessageQueue]] = {}
        for cid, queues in (mapping or {}).items():
            frozen = frozenset(queues)
            bad = [q for q in frozen if not isinstance(q, MessageQueue)]
            if bad:
                raise ConfigError(f"by_config: {cid!r} maps to non-queue values {bad!r}")
            self.mapping[cid] = frozen

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        all_queues: Iterable[MessageQueue],
        all_cids: Iterable[str],
    ) -> list[MessageQueue]:
        """Return the sorted configured queues of ``current_cid`` that exist in ``all_queues``."""
        prepared = _normalise(current_cid, all_queues, all_cids)
        if prepared is None:
            return []
        queues, _, _ = prepared
        configured = self.mapping.get(current_cid, frozenset())
        return [q for q in queues if q in configured]


_STRATEGIES: dict[str, type[AllocateStrategy]] = {
    cls.name: cls
    for cls in (AverageStrategy, AverageByCircleStrategy, ConsistentHashStrategy, ConfigStrategy)
}

STRATEGY_NAMES: tuple[str, ...] = tuple(sorted(_STRATEGIES))


def strategy_by_name(name: str, **kwargs: Any) -> AllocateStrategy:
    """Build the strategy registered as ``name`` with ``kwargs`` as constructor arguments.

    Raises ConfigError naming the valid names for an unknown ``name``, and
    ConfigError when ``kwargs`` do not fit that strategy's constructor.
    """
    cls = _STRATEGIES.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown allocation strategy {name!r}; valid: {', '.join(STRATEGY_NAMES)}"
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad arguments for strategy {name!r}: {exc}") from exc
