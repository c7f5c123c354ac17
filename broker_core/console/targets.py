"""The broker groups the console talks to, each by a single-broker client.

A console started with ``--endpoints`` sees one broker (named by its Health answer); one
started with ``--namesrv`` sees every broker group the NameServers list, and talks to
each group's master. The clients come from one :class:`RocketMQClient` per console user
(its credentials sign every call), so the broker decides what each user may see and do.
"""

from __future__ import annotations

from broker_core.client import RocketMQClient
from broker_core.errors import RocketMQError


class Targets:
    """Broker group name -> a single-broker client of its master, for one user's client.

    The clients belong to ``client``: closing it closes them.
    """

    def __init__(self, client: RocketMQClient) -> None:
        self.client = client
        self._single_name: str | None = None

    def brokers(self) -> dict[str, RocketMQClient]:
        """Every live broker group (sorted by name); RocketMQError when none answers."""
        cluster = self.client.cluster
        if cluster is None:
            if self._single_name is None:
                self._single_name = str(self.client.health()["broker_name"])
            return {self._single_name: self.client}
        from broker_core.cluster.routes import master_grpc_addr

        brokers = cluster.routing.routes.cluster_info().brokers
        found = {
            name: RocketMQClient.of(cluster.routing.broker_at(addr))
            for name in sorted(brokers)
            if (addr := master_grpc_addr(brokers[name]))
        }
        if not found:
            raise RocketMQError(f"the NameServers at {cluster.namesrv} list no live broker")
        return found

    def holding(self, topic: str) -> dict[str, RocketMQClient]:
        """The broker groups that hold ``topic`` (TopicNotFoundError when none does)."""
        return self.client.broker_clients(topic)
