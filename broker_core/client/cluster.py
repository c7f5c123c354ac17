"""A client of a whole cluster: sends and queue calls routed over broker clients.

:class:`ClusterClient` (``RocketMQClient(namesrv="h:p;h:p")``) finds a topic's broker
groups through :class:`~broker_core.client.routing.ClusterRouting` and calls the
:class:`~broker_core.client.broker_client.BrokerClient` of the right one. Contract:

* **Queue calls** (pull, pull_raw, pull_columns, offsets) take ``broker=NAME``: a queue
  is (broker, queue id). Without ``broker`` they go to the topic's only broker group,
  and raise InvalidArgumentError naming the groups when there are several.
* **Sends** rotate over the broker groups with writable queues, one request per group
  in turn; a group that cannot be reached is skipped (routes are refreshed and the next
  group gets the request). A topic no group has yet goes to one live broker, whose
  auto-creation (a broker setting) decides. Messages with a message group (FIFO) are
  pinned: each group's messages go to the broker group its hash picks among the
  writable ones (sorted by name), the same one as long as those stay the same, and the
  broker pins it to one queue; that group not being reachable is an error, never a
  silent move. A batch that spans broker groups is one request per group (each stored
  whole or not at all; not atomic across groups). The ``*_async`` sends are sent at
  once (their ``result()`` is ready).
* Admin calls are not here: they go to one broker (``RocketMQClient`` picks it).
* Pickles without connections; a copy in another process reconnects on first use.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from broker_core.client.broker_client import BrokerClient
from broker_core.client.columnar import ColumnBatch
from broker_core.client.in_flight import PendingSend, SendWindow
from broker_core.client.model import (
    OutgoingMessage,
    PullBatch,
    QueueInfo,
    RawPullBatch,
    SendReceipt,
)
from broker_core.client.routing import ClusterRouting
from broker_core.errors import InvalidArgumentError, RocketMQError, TopicNotFoundError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from broker_core.client.pulling import PullOptions

T = TypeVar("T")


def _picker(indexes: list[int]) -> Callable[[Sequence[T] | None], list[T] | None]:
    """``pick(column)``: the column's items at ``indexes`` (None stays None)."""

    def pick(column: Sequence[T] | None) -> list[T] | None:
        return None if column is None else [column[i] for i in indexes]

    return pick


class ClusterClient:
    """Sends and queue calls over a cluster; see the module docstring."""

    def __init__(self, routing: ClusterRouting) -> None:
        self.routing = routing
        self.namesrv = routing.namesrv
        self._turn = itertools.count()
        self._done = SendWindow(1, lambda: routing.namesrv)  # makes answered PendingSends

    def __getstate__(self) -> dict[str, Any]:
        return {"routing": self.routing, "namesrv": self.namesrv}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["routing"])  # type: ignore[misc]

    # ---- routing of sends -----------------------------------------------------------------

    def _writable(self, topic: str) -> list[Any] | None:
        """The topic's writable groups by name; None when no group holds the topic."""
        try:
            groups = self.routing.writable(topic)
        except TopicNotFoundError:
            return None
        if not groups:
            raise InvalidArgumentError(f"topic {topic!r} has no writable queue in the cluster")
        return groups

    def send_routed(self, topic: str, attempt: Callable[[BrokerClient], T]) -> T:
        """Run ``attempt(client)`` on the next writable broker group of ``topic``,
        moving on to the following groups while one is unreachable."""
        groups = self._writable(topic)
        if groups is None:
            return attempt(self.routing.broker_at(self.routing.first_broker_addr()))
        start = next(self._turn)
        last: RocketMQError | None = None
        for i in range(len(groups)):
            group = groups[(start + i) % len(groups)]
            try:
                return attempt(self.routing.broker_at(group.grpc_addr))
            except RocketMQError as exc:
                if not exc.retriable:
                    raise
                last = exc
                self.routing.invalidate(topic)
        assert last is not None
        raise last

    def send_split(
        self,
        topic: str,
        message_groups: Sequence[str | None],
        attempt: Callable[[BrokerClient, list[int]], list[T]],
    ) -> list[T]:
        """``attempt(client, indexes)`` per broker group for the messages at ``indexes``:
        those with a message group on the group its hash pins, the others together on the
        next group in turn (with :meth:`send_routed`'s fail-over); results in message order."""
        groups = self._writable(topic)
        if groups is None:
            everything = list(range(len(message_groups)))
            return attempt(self.routing.broker_at(self.routing.first_broker_addr()), everything)
        parts: dict[str, list[int]] = {}
        free: list[int] = []
        for i, group in enumerate(message_groups):
            if group is None:
                free.append(i)
            else:
                pinned = groups[zlib.crc32(group.encode()) % len(groups)].grpc_addr
                parts.setdefault(pinned, []).append(i)
        results: list[T | None] = [None] * len(message_groups)
        for addr, indexes in parts.items():
            answers = attempt(self.routing.broker_at(addr), indexes)
            for i, result in zip(indexes, answers, strict=True):
                results[i] = result
        if free:
            answers = self.send_routed(topic, lambda c: attempt(c, free))
            for i, result in zip(free, answers, strict=True):
                results[i] = result
        return results  # type: ignore[return-value]  # every index was filled above

    # ---- sends ------------------------------------------------------------------------------

    def send_batch(self, topic: str, messages: Iterable[Any]) -> list[SendReceipt]:
        """``Producer.send_batch`` on the topic's next broker group (FIFO: pinned)."""
        items = list(messages)
        groups = [None if type(m) is bytes else OutgoingMessage.of(m).message_group for m in items]
        if any(groups):  # FIFO messages: each message group pinned to one broker group
            return self.send_split(
                topic, groups, lambda c, idx: c.producer.send_batch(topic, [items[i] for i in idx])
            )
        return self.send_routed(topic, lambda c: c.producer.send_batch(topic, items))

    def send_columns(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        tags: Sequence[str | None] | None = None,
        keys: Sequence[Sequence[str] | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
        message_groups: Sequence[str | None] | None = None,
        delivery_ms: Sequence[int | None] | None = None,
    ) -> list[SendReceipt]:
        """``Producer.send_columns`` on the topic's next broker group (FIFO: pinned)."""
        if message_groups is not None and any(message_groups):

            def part(c: BrokerClient, idx: list[int]) -> list[SendReceipt]:
                pick = _picker(idx)
                return c.producer.send_columns(
                    topic,
                    pick(bodies) or [],
                    tags=pick(tags),
                    keys=pick(keys),
                    properties=pick(properties),
                    message_groups=pick(message_groups),
                    delivery_ms=pick(delivery_ms),
                )

            return self.send_split(topic, message_groups, part)
        return self.send_routed(
            topic,
            lambda c: c.producer.send_columns(
                topic,
                bodies,
                tags=tags,
                keys=keys,
                properties=properties,
                message_groups=message_groups,
                delivery_ms=delivery_ms,
            ),
        )

    def send(self, topic: str, body: bytes | str, **fields: Any) -> SendReceipt:
        """``Producer.send`` on the topic's next broker group (its message group's)."""
        group = fields.get("message_group")
        if group:
            return self.send_split(
                topic, [group], lambda c, _: [c.producer.send(topic, body, **fields)]
            )[0]
        return self.send_routed(topic, lambda c: c.producer.send(topic, body, **fields))

    def send_batch_async(self, topic: str, messages: Iterable[Any]) -> PendingSend:
        """:meth:`send_batch`, sent now; the PendingSend is already answered."""
        return self._done.finished(self.send_batch(topic, messages))

    def send_columns_async(
        self, topic: str, bodies: Sequence[bytes], *, receipts: bool = True, **columns: Any
    ) -> PendingSend:
        """:meth:`send_columns`, sent now; the PendingSend is already answered."""
        return self._done.finished(self.send_columns(topic, bodies, **columns))

    def flush(self) -> None:
        """Wait for every send request in flight of every broker client."""
        for client in self.routing.opened():
            client.flush()

    # ---- queue calls ------------------------------------------------------------------------

    def query_route(self, topic: str) -> list[QueueInfo]:
        """Every broker group's queues of ``topic``, sorted by (broker, queue id)."""
        # any broker of a cluster answers for every broker group of the topic
        first = self.routing.broker_at(self.routing.brokers(topic)[0].grpc_addr)
        queues = first.offsets.query_route(topic)
        return sorted(queues, key=lambda q: (q.broker_name, q.queue_id))

    def get_offset(
        self, group: str, topic: str, queue_id: int, *, broker: str | None = None
    ) -> int:
        offsets = self.routing.for_queue(topic, broker).offsets
        return offsets.get_offset(group, topic, queue_id)

    def update_offset(
        self, group: str, topic: str, queue_id: int, offset: int, *, broker: str | None = None
    ) -> None:
        offsets = self.routing.for_queue(topic, broker).offsets
        offsets.update_offset(group, topic, queue_id, offset)

    def query_offset(
        self,
        topic: str,
        queue_id: int,
        policy: str = "END",
        *,
        timestamp_ms: int | None = None,
        broker: str | None = None,
    ) -> int:
        offsets = self.routing.for_queue(topic, broker).offsets
        return offsets.query_offset(topic, queue_id, policy, timestamp_ms=timestamp_ms)

    def pull(
        self, group: str, topic: str, *args: Any, broker: str | None = None, **kwargs: Any
    ) -> PullBatch:
        """``Puller.pull`` on the broker group named ``broker``."""
        return self.routing.for_queue(topic, broker).puller.pull(group, topic, *args, **kwargs)

    def pull_raw(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        **options: Unpack[PullOptions],
    ) -> RawPullBatch:
        """``Puller.pull_raw`` on the broker group named by the ``broker`` option."""
        puller = self.routing.for_queue(topic, options.pop("broker", None)).puller
        return puller.pull_raw(group, topic, queue_id, offset, max_count, **options)

    def pull_columns(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        **options: Unpack[PullOptions],
    ) -> ColumnBatch:
        """``Puller.pull_columns`` on the broker group named by the ``broker`` option."""
        puller = self.routing.for_queue(topic, options.pop("broker", None)).puller
        return puller.pull_columns(group, topic, queue_id, offset, max_count, **options)

    def close(self) -> None:
        """Close every connection of this process (the next call reopens them)."""
        self.routing.close()
