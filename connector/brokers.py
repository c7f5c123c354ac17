"""The driver's view of the brokers a read names.

* :class:`BrokerSet`: broker names, topics, each queue's ``[min, max)`` (one
  ``TopicStatus`` call per broker and topic), offsets by timestamp, offset commits. Its
  clients connect lazily, so it pickles and costs nothing until used.
* ``routes.open_brokers`` picks it (``endpoints``) or ``routes.RoutedBrokerSet`` (``namesrv``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from broker_core.client import RocketMQClient
from broker_core.errors import ConfigError, TopicNotFoundError
from connector.credentials import NO_ACCESS, Access
from connector.offsets import Offsets, QueueRef
from connector.options import ReadOptions

REQUEST_TIMEOUT_S: Final = 10.0  # one broker call (the client retries a timed-out call twice)

Bounds = dict[QueueRef, tuple[int, int]]


class BrokerSet:
    """The brokers named by the ``endpoints`` option, seen from the driver.

    Lazy and picklable: clients open their channels on first use, per process.
    A broker is known by its name (the ``broker`` of a queue key) and reached at the
    endpoint the user gave for it, not the one it advertises.
    """

    topic_hint: tuple[str, ...] = ()  # a broker without admin service is named by a route

    def __init__(self, endpoints: Sequence[str], access: Access = NO_ACCESS) -> None:
        self.access = access
        self._clients = {
            endpoint: RocketMQClient(
                endpoint, timeout_s=REQUEST_TIMEOUT_S, **access.client_kwargs()
            )
            for endpoint in endpoints
        }
        self._names: dict[str, str] | None = None

    def names(self) -> dict[str, str]:
        """Broker name → endpoint, for every endpoint given (asked once).

        Queues are keyed by broker name, so two endpoints answering with the same name
        would be read as one broker (and lose rows): that is a ConfigError naming both.
        """
        if self._names is None:
            names: dict[str, str] = {}
            for endpoint, client in self._clients.items():
                name = client.broker_name(self.topic_hint)
                if name in names:
                    raise ConfigError(
                        f"option 'endpoints': {names[name]} and {endpoint} are both named "
                        f"broker {name!r}; the source keys queues by broker name, so each "
                        f"broker needs its own (broker_name in the broker's config), or give "
                        f"one broker only once"
                    )
                names[name] = endpoint
            self._names = names
        return self._names

    def client_of(self, broker: str) -> RocketMQClient:
        return self._clients[self.endpoint_of(broker)]

    def endpoint_of(self, broker: str) -> str:
        """The endpoint of ``broker``; ConfigError when no endpoint given is that broker."""
        if broker not in self.names():
            self._names = None  # a broker may have been renamed or restarted: ask again
        if broker not in self.names():
            raise ConfigError(
                f"option 'endpoints': no endpoint given is broker {broker!r} "
                f"(known: {sorted(self.names())})"
            )
        return self.names()[broker]

    def topics(self, options: ReadOptions) -> list[str]:
        """The subscribed topics: the names given, or every listed topic the pattern matches."""
        if options.topics is not None:
            return list(options.topics)
        found = {str(t["name"]) for c in self._clients.values() for t in c.list_topics()}
        return sorted(t for t in found if options.matches_topic(t))

    def bounds(self, topics: Sequence[str], *, explicit: bool) -> Bounds:
        """``[min, max)`` of every read queue of ``topics`` on every broker.

        With ``explicit`` (topics named by the user), a topic no broker has is an error.
        """
        found: Bounds = {}
        for broker, endpoint in self.names().items():
            for topic in topics:
                try:
                    rows = self._clients[endpoint].topic_status(topic)
                except TopicNotFoundError:
                    continue
                for row in rows:
                    ref = QueueRef(topic, broker, int(row["queue_id"]))
                    found[ref] = (int(row["min_offset"]), int(row["max_offset"]))
        missing = sorted(set(topics) - {ref.topic for ref in found}) if explicit else []
        if missing:
            raise TopicNotFoundError(
                f"option 'topic'/'topics': {missing} not found on {sorted(self._clients)}"
            )
        return found

    def offsets_at(self, refs: Sequence[QueueRef], timestamp_ms: int) -> Offsets:
        """Per queue, the first offset stored at or after ``timestamp_ms`` (or its end)."""
        return {
            ref: self.client_of(ref.broker).query_offset(
                ref.topic, ref.queue_id, "TIMESTAMP", timestamp_ms=timestamp_ms
            )
            for ref in refs
        }

    def commit(self, group: str, offsets: Offsets) -> None:
        """Store ``offsets`` as ``group``'s consumer offsets (idempotent)."""
        for ref, offset in sorted(offsets.items()):
            self.client_of(ref.broker).update_offset(group, ref.topic, ref.queue_id, offset)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
