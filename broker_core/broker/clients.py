"""Which producers and consumers are alive, per group, and which queues each consumer gets.

Clients announce themselves with heartbeats; a client silent for longer than
``expiry_ms`` is dropped by :meth:`ClientRegistry.expire`, which a daemon thread
(:meth:`ClientRegistry.start` / :meth:`ClientRegistry.stop`) runs every
``check_interval_ms``. Producer and consumer groups are separate name spaces, as in
RocketMQ: one client id may be a producer of group ``P`` and a consumer of group ``C``.

Durability: none. The registry lives in memory only; after a broker restart it is empty
and fills again within one heartbeat interval, because clients keep heartbeating. Queue
assignments are recomputed from membership, so nothing needs to survive.

Listeners (``add_listener(cb)``) are called with a consumer group's name whenever that
group's consumer membership changes (a join, a leave, an expiry, or a member changing the
topics it subscribes to). They run on the thread that caused the change (the heartbeat
caller or the expiry thread), after the registry lock is released, so they may call back
into the registry; they should re-read membership rather than assume an order of events.
A listener that raises does not stop the others; the first error is re-raised to the
caller once all have run (on the expiry thread that ends the thread, loudly).

Threads: every public method may be called from any thread; one lock guards the tables.

Example::

    >>> registry = ClientRegistry(expiry_ms=30_000, clock_ms=lambda: 0)
    >>> registry.heartbeat("GID_a", "c1", topics=["orders"], kind="consumer", now_ms=0)
    True
    >>> registry.consumers("GID_a"), registry.expire(now_ms=30_001)
    (['c1'], [('GID_a', 'c1')])
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from broker_core.broker.rebalance import MessageQueue, strategy_by_name
from broker_core.clock import monotonic_ms
from broker_core.errors import InvalidArgumentError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.service_thread import ServiceThread

ClientKind = Literal["producer", "consumer"]
KINDS: Final = ("producer", "consumer")
DEFAULT_EXPIRY_MS: Final = 120_000
DEFAULT_CHECK_INTERVAL_MS: Final = 10_000
Listener = Callable[[str], None]


def assign_queues(
    group: str,
    client_id: str,
    queues: Iterable[MessageQueue],
    consumer_ids: Iterable[str],
    strategy_name: str,
    *,
    broadcast: bool,
) -> list[MessageQueue]:
    """The queues ``client_id`` consumes (pure).

    Broadcasting: every member gets every queue. Clustering: the named strategy's share
    among ``consumer_ids``. A client that is not in ``consumer_ids`` gets nothing either
    way. The result is sorted. Raises ConfigError for an unknown strategy name.
    """
    strategy = strategy_by_name(strategy_name)
    cids = set(consumer_ids)
    if broadcast:
        return sorted(set(queues)) if client_id in cids else []
    return strategy.allocate(group, client_id, queues, cids)


@dataclass(frozen=True)
class _Client:
    topics: frozenset[str]
    last_heartbeat_ms: int


def _check_client_id(client_id: str) -> str:
    if not isinstance(client_id, str) or not client_id:
        raise InvalidArgumentError(f"client id must be a non-empty string, got {client_id!r}")
    return client_id


def _check_topics(topics: Iterable[str]) -> frozenset[str]:
    if isinstance(topics, str | bytes):
        raise InvalidArgumentError(f"topics must be an iterable of names, not {topics!r}")
    return frozenset(validate_topic_name(t) for t in topics)


class ClientRegistry:
    """Live producers and consumers per group, expired after ``expiry_ms`` of silence."""

    def __init__(
        self,
        *,
        expiry_ms: int = DEFAULT_EXPIRY_MS,
        clock_ms: Callable[[], int] = monotonic_ms,
        check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
    ) -> None:
        """Both durations are ints ≥ 1, checked where they are configured (``BrokerConfig``)."""
        self.expiry_ms = expiry_ms
        self.check_interval_ms = check_interval_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._members: dict[tuple[ClientKind, str], dict[str, _Client]] = {}
        self._listeners: list[Listener] = []
        # A failed expiry round (a listener raised) is logged; the next round retries.
        self.thread = ServiceThread("client-expiry", self._round, interval_ms=check_interval_ms)

    # ------------------------------------------------------------------ membership

    def heartbeat(
        self,
        group: str,
        client_id: str,
        *,
        topics: Iterable[str],
        kind: ClientKind,
        now_ms: int | None = None,
    ) -> bool:
        """Record that ``client_id`` of ``group`` is alive and what topics it uses.

        Returns True when the group's membership changed: the client is new, or its topic
        set differs from its last heartbeat. Consumer changes notify the listeners.
        """
        validate_group_name(group)
        _check_client_id(client_id)
        if kind not in KINDS:
            raise InvalidArgumentError(f"kind must be 'producer' or 'consumer', got {kind!r}")
        topic_set = _check_topics(topics)
        now = self._clock_ms() if now_ms is None else now_ms
        with self._lock:
            members = self._members.setdefault((kind, group), {})
            old = members.get(client_id)
            last = now if old is None else max(now, old.last_heartbeat_ms)
            members[client_id] = _Client(topic_set, last)
            changed = old is None or old.topics != topic_set
        if changed and kind == "consumer":
            self._notify([group])
        return changed

    def unregister(self, group: str, client_id: str) -> bool:
        """Remove ``client_id`` from ``group`` as producer and consumer; True if it was there."""
        removed: list[ClientKind] = []
        with self._lock:
            for kind in KINDS:
                if self._remove_locked(kind, group, client_id):
                    removed.append(kind)
        if "consumer" in removed:
            self._notify([group])
        return bool(removed)

    def _remove_locked(self, kind: ClientKind, group: str, client_id: str) -> bool:
        members = self._members.get((kind, group))
        if members is None or members.pop(client_id, None) is None:
            return False
        if not members:
            del self._members[(kind, group)]
        return True

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Drop clients silent for more than ``expiry_ms``; return sorted (group, client id)."""
        dropped: set[tuple[ClientKind, str, str]] = set()
        with self._lock:
            for (kind, group), members in list(self._members.items()):
                for client_id, client in list(members.items()):
                    if now_ms - client.last_heartbeat_ms > self.expiry_ms:
                        dropped.add((kind, group, client_id))
            for kind, group, client_id in dropped:
                self._remove_locked(kind, group, client_id)
        self._notify(sorted({g for k, g, _ in dropped if k == "consumer"}))
        return sorted({(group, client_id) for _, group, client_id in dropped})

    run_once = expire  # what the expiry thread does each tick; tests call it directly

    # ------------------------------------------------------------------ queries

    def _ids(self, kind: ClientKind, group: str, topic: str | None = None) -> list[str]:
        with self._lock:
            members = self._members.get((kind, group), {})
            return sorted(c for c, m in members.items() if topic is None or topic in m.topics)

    def consumers(self, group: str, topic: str | None = None) -> list[str]:
        """Sorted ids of ``group``'s live consumers (only those subscribing ``topic`` if given)."""
        return self._ids("consumer", group, topic)

    def producers(self, group: str) -> list[str]:
        """Sorted ids of ``group``'s live producers."""
        return self._ids("producer", group)

    def groups_of_topic(self, topic: str) -> list[str]:
        """Sorted consumer groups with at least one live consumer subscribing ``topic``."""
        with self._lock:
            return sorted(
                group
                for (kind, group), members in self._members.items()
                if kind == "consumer" and any(topic in m.topics for m in members.values())
            )

    def assignment(
        self,
        group: str,
        topic: str,
        client_id: str,
        queues: list[MessageQueue],
        strategy_name: str,
        *,
        broadcast: bool = False,
    ) -> list[MessageQueue]:
        """The queues of ``topic`` that ``client_id`` should consume right now.

        Shares are computed among the group's live consumers that subscribe ``topic``, so
        a member subscribing other topics does not leave queues unowned. See
        :func:`assign_queues` for clustering vs broadcasting.
        """
        members = self.consumers(group, topic)
        return assign_queues(group, client_id, queues, members, strategy_name, broadcast=broadcast)

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(group)`` after every change of a consumer group's membership."""
        with self._lock:
            self._listeners.append(listener)

    def _notify(self, groups: list[str]) -> None:
        if not groups:
            return
        with self._lock:
            listeners = list(self._listeners)
        errors: list[Exception] = []
        for group in groups:
            for listener in listeners:
                try:
                    listener(group)
                except Exception as exc:  # re-raised below once every listener ran
                    errors.append(exc)
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ expiry thread

    def start(self) -> None:
        """Start the daemon thread that runs :meth:`expire` every ``check_interval_ms``."""
        self.thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the expiry thread and wait for it (at most ``timeout_s``)."""
        self.thread.stop(timeout_ms=timeout_s * 1000)

    def _round(self) -> None:
        self.expire(self._clock_ms())
