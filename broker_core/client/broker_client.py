"""One broker endpoint, as parts: a transport and the call families that use it.

A :class:`BrokerClient` holds

* ``transport`` (:class:`~broker_core.client.transport.Transport`): the channel, headers,
  retries and error mapping every part calls through;
* ``offsets`` (:class:`~broker_core.client.offsets.Offsets`): QueryRoute and the offset RPCs;
* ``puller`` (:class:`~broker_core.client.pulling.Puller`): PullMessage and PullRaw;
* ``producer`` (:class:`~broker_core.client.producing.Producer`): sends and their window of
  requests in flight;
* ``admin`` (:class:`~broker_core.client.admin_auth.AuthAdminCalls`): the admin service.

The parts know nothing of each other but what they are handed (the puller reads queue
bounds through ``offsets``). :class:`~broker_core.client.cluster.ClusterClient` routes
over many of these; :class:`~broker_core.client.RocketMQClient` is the public facade of
either. Pickles without its channel; a copy in another process reconnects on first use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker_core.client import standard
from broker_core.client.admin_auth import AuthAdminCalls
from broker_core.client.offsets import Offsets
from broker_core.client.producing import Producer
from broker_core.client.pulling import Puller
from broker_core.client.settings import ClientSettings
from broker_core.client.transport import Transport


class BrokerClient:
    """The parts of one endpoint's client; see the module docstring."""

    def __init__(self, endpoint: str, settings: ClientSettings) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self.transport = Transport(endpoint, settings)
        self.offsets = Offsets(self.transport)
        self.puller = Puller(self.transport, self.offsets)
        self.producer = Producer(self.transport)
        self.admin = AuthAdminCalls(self.transport.admin)

    def __repr__(self) -> str:
        return f"BrokerClient({self.endpoint!r})"

    def topic_status(self, name: str) -> list[dict[str, Any]]:
        """Per read queue: ``queue_id``, ``min_offset``, ``max_offset`` (by the admin
        service, or by QueryRoute and QueryOffset on a standard endpoint)."""
        return self.transport.extended(
            lambda: self.admin.topic_status(name),
            lambda: list(standard.topic_status(self.offsets, name)),
        )

    def broker_name(self, topics: Iterable[str] = ()) -> str:
        """The name of the broker at this endpoint (admin Health; on a standard endpoint
        the route of the first of ``topics`` that exists there)."""
        names = list(topics)
        return self.transport.extended(
            lambda: str(self.admin.health()["broker_name"]),
            lambda: standard.broker_name(self.offsets, names),
        )

    def flush(self) -> None:
        """Wait for every send request in flight; raise the first error among them."""
        self.producer.flush()

    def close(self) -> None:
        """Finish the send requests in flight (raising the first error among them), then
        close this process's channel (idempotent); later calls open a new one."""
        try:
            if self.transport.owned_here:
                self.producer.flush()
        finally:
            self.transport.close()
