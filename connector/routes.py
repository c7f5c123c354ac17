"""The ``namesrv`` mode of the source: brokers found through the NameServers' routes.

:class:`RoutedBrokerSet` is a :class:`~connector.brokers.BrokerSet` whose brokers come
from each subscribed topic's route (``NameServerClient.get_route``) instead of a list of
endpoints:

* the routes come from :class:`~broker_core.client.routing.ClusterRouting`, the client's
  one routing by NameServer;
* a queue is (topic, broker group, queue id), exactly the key the checkpoint already
  uses (``{"orders": {"broker-a:0": 12}}``), and is read from the master of the group
  (``BrokerData.grpc_addrs[0]``); only groups whose route entry is readable
  (``Perm.READ``) with a live master count;
* a group's queues are its route entry's ``read_queue_nums`` first queues, bounded by
  asking that broker (``TopicStatus``);
* every call re-reads the routes (one NameServer request per topic per trigger), so a
  group that joins a topic is seen by the next trigger and one that leaves disappears
  from the bounds (the stream reader reports its queues, see ``failOnDataLoss``).

The NameServer connection is opened on first use and never pickled.
:func:`open_brokers` picks a :class:`~connector.brokers.BrokerSet` or this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from broker_core.client import RocketMQClient
from broker_core.client.routing import ClusterRouting
from broker_core.client.settings import ClientSettings
from broker_core.errors import ConfigError, TopicNotFoundError
from connector.brokers import REQUEST_TIMEOUT_S, Bounds, BrokerSet
from connector.credentials import NO_ACCESS, Access
from connector.offsets import QueueRef
from connector.options import ReadOptions

if TYPE_CHECKING:
    from broker_core.cluster.routes import BrokerQueues

NAMESRV_TIMEOUT_S: Final = 5.0


def open_brokers(options: ReadOptions) -> BrokerSet:
    """The brokers of a read: the ``endpoints`` given, or the ``namesrv`` routes."""
    if options.namesrv is None:
        brokers = BrokerSet(options.endpoints, options.access)
        brokers.topic_hint = tuple(options.topics or ())
        return brokers
    return RoutedBrokerSet(options.namesrv, options.access)


class RoutedBrokerSet(BrokerSet):
    """The brokers of the subscribed topics' routes, seen from the driver."""

    def __init__(self, namesrv: str, access: Access = NO_ACCESS) -> None:
        super().__init__((), access)
        self.namesrv = namesrv
        settings = ClientSettings(timeout_s=REQUEST_TIMEOUT_S, **access.client_kwargs())
        self.routing = ClusterRouting(
            namesrv, settings, namesrv_timeout_s=NAMESRV_TIMEOUT_S, namesrv_tls=False
        )
        self._routed: dict[str, list[BrokerQueues]] = {}  # topic -> its readable groups

    def route(self, topic: str) -> list[BrokerQueues]:
        """The readable broker groups of ``topic`` (empty when no group has it), asked of
        the NameServers now."""
        self.routing.invalidate(topic)
        self._routed[topic] = self.routing.readable(topic)
        self._names = None
        return self._routed[topic]

    def names(self) -> dict[str, str]:
        """Broker group name -> master gRPC address, over the routes read so far (the
        routes are read again when this is asked after a miss)."""
        if self._names is None:
            self._names = {
                g.broker_name: g.grpc_addr for groups in self._routed.values() for g in groups
            }
        return self._names

    def endpoint_of(self, broker: str) -> str:
        """The master gRPC address of ``broker``; ConfigError when no route names it."""
        if broker not in self.names():
            for topic in list(self._routed):
                self.route(topic)
        if broker not in self.names():
            raise ConfigError(
                f"option 'namesrv': broker group {broker!r} is in no route of "
                f"the subscribed topics {sorted(self._routed)} (known: "
                f"{sorted(self.names())})"
            )
        return self.names()[broker]

    def client_of(self, broker: str) -> RocketMQClient:
        return self._client_at(self.endpoint_of(broker))

    def _client_at(self, addr: str) -> RocketMQClient:
        if addr not in self._clients:
            self._clients[addr] = RocketMQClient.of(self.routing.broker_at(addr))
        return self._clients[addr]

    def topics(self, options: ReadOptions) -> list[str]:
        """The names given, or every topic the NameServers list that the pattern matches."""
        if options.topics is not None:
            return list(options.topics)
        return sorted(t for t in self.routing.all_topics() if options.matches_topic(t))

    def bounds(self, topics: Sequence[str], *, explicit: bool) -> Bounds:
        """``[min, max)`` of every read queue of ``topics`` in every group of its route.

        With ``explicit`` (topics named by the user), a topic no route has is an error.
        """
        found: Bounds = {}
        for topic in topics:
            for group in self.route(topic):
                try:
                    rows = self._client_at(group.grpc_addr).topic_status(topic)
                except TopicNotFoundError:
                    continue  # deleted since the route was read
                for row in rows:
                    if int(row["queue_id"]) < group.read_queue_nums:
                        ref = QueueRef(topic, group.broker_name, int(row["queue_id"]))
                        found[ref] = (int(row["min_offset"]), int(row["max_offset"]))
        missing = sorted(set(topics) - {ref.topic for ref in found}) if explicit else []
        if missing:
            raise TopicNotFoundError(
                f"option 'topic'/'topics': {missing} has no readable "
                f"route at the NameServers {self.namesrv}"
            )
        return found

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.routing.close()
