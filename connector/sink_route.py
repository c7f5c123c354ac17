"""Where the sink's rows go: the brokers of a topic, and which row goes to which of them.

* :func:`spread` (pure) assigns rows to brokers: a row with a message group always goes
  to the same broker (a stable hash of the group over the brokers, sorted by name), where
  the broker pins the group to one queue (FIFO); other rows go round robin, continuing
  from where the previous request stopped, so a task's rows spread evenly over every
  broker and each broker spreads them over its queues.
* :class:`SinkTargets` holds a task's clients: one per endpoint given (``endpoints``),
  or, with ``namesrv``, one per master of the broker groups in each topic's route that
  take writes (:meth:`ClusterRouting.writable
  <broker_core.client.routing.ClusterRouting.writable>`, the client's one routing by
  NameServer; read again every ``ROUTE_TTL_S``). Opened lazily, closed together.

>>> spread(3, 7, None, start=1)
[[2, 5], [0, 3, 6], [1, 4]]
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Final

from broker_core.client import RocketMQClient
from broker_core.client.routing import ClusterRouting
from broker_core.client.settings import ClientSettings
from broker_core.errors import ConfigError, TopicNotFoundError
from connector.credentials import NO_ACCESS, Access

ROUTE_TTL_S: Final = 3.0
NAMESRV_TIMEOUT_S: Final = 5.0


def stable_index(group: str, brokers: int) -> int:
    """The broker (0 .. brokers-1) of a message group; the same in every process."""
    return zlib.crc32(group.encode("utf-8")) % brokers


def spread(
    brokers: int, rows: int, message_groups: Sequence[str | None] | None, *, start: int
) -> list[list[int]]:
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
    """The sink's brokers per topic (see the module docstring).

    Not thread-safe: one per task. ``clients(topic)`` is the list :func:`spread`'s
    indexes refer to, in a stable order (by endpoint, or by broker group name).
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout_s: float,
        namesrv: str | None = None,
        access: Access = NO_ACCESS,
    ) -> None:
        if not endpoints and namesrv is None:
            raise ConfigError("option 'endpoints' / 'namesrv': one of them is required")
        self.namesrv = namesrv
        self.timeout_s = timeout_s
        self.access = access
        settings = ClientSettings(timeout_s=timeout_s, **access.client_kwargs())
        self._by_addr = {
            e: RocketMQClient(e, timeout_s=timeout_s, **access.client_kwargs())
            for e in sorted(endpoints)
        }
        self._fixed = list(self._by_addr.values())
        self._routing = (
            None
            if namesrv is None
            else ClusterRouting(
                namesrv,
                settings,
                route_ttl_ms=int(ROUTE_TTL_S * 1000),
                namesrv_timeout_s=NAMESRV_TIMEOUT_S,
                namesrv_tls=False,
            )
        )

    def clients(self, topic: str) -> list[RocketMQClient]:
        """The clients of the brokers ``topic``'s rows are spread over."""
        if self._routing is None:
            return self._fixed  # every endpoint serves every topic (it auto-creates or refuses)
        try:
            writable = self._routing.writable(topic)
        except TopicNotFoundError:
            writable = []
        if not writable:
            raise TopicNotFoundError(
                f"rocketmq sink: topic {topic!r} has no writable broker group in the route of "
                f"the NameServers {self.namesrv}; create it on the cluster first "
                f"(rmq topic create {topic} --namesrv {self.namesrv})"
            )
        return [self._client_at(g.grpc_addr) for g in writable]  # sorted by group name

    def _client_at(self, addr: str) -> RocketMQClient:
        client = self._by_addr.get(addr)
        if client is None:
            assert self._routing is not None
            client = self._by_addr[addr] = RocketMQClient.of(self._routing.broker_at(addr))
        return client

    def flush(self) -> None:
        """Wait until every request in flight is answered; raises the first send error."""
        for client in self._by_addr.values():
            client.flush()

    def close(self) -> None:
        try:
            for client in self._by_addr.values():
                client.close()
        finally:
            if self._routing is not None:
                self._routing.close()
