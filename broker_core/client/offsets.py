"""Routes and group offsets of one broker endpoint: QueryRoute, GetOffset, UpdateOffset
and QueryOffset over its :class:`~broker_core.client.transport.Transport`. All are
idempotent, so retried. Per-queue calls take ``broker=NAME`` as a cluster client's do
(``client/cluster.py``); here the endpoint is the broker, so it is not used."""

from __future__ import annotations

from typing import Final

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import convert
from broker_core.client.model import QueueInfo
from broker_core.client.transport import Transport
from broker_core.errors import InvalidArgumentError

QUERY_POLICIES: Final = {
    "BEGINNING": pb.QueryOffsetPolicy.BEGINNING,
    "END": pb.QueryOffsetPolicy.END,
    "TIMESTAMP": pb.QueryOffsetPolicy.TIMESTAMP,
}


class Offsets:
    """Queue routes and the offsets of groups and queues, at one endpoint."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @property
    def endpoint(self) -> str:
        return self.transport.endpoint

    def query_route(self, topic: str) -> list[QueueInfo]:
        """The topic's message queues (TopicNotFoundError when it does not exist)."""
        request = service_pb2.QueryRouteRequest(topic=self.transport.resource(topic))
        host, _, port = self.transport.endpoint.rpartition(":")
        request.endpoints.scheme = pb.AddressScheme.IPv4
        request.endpoints.addresses.add(host=host, port=int(port))
        response = self.transport.call("QueryRoute", request)
        return sorted(
            (convert.queue_from_protobuf(q) for q in response.message_queues),
            key=lambda q: q.queue_id,
        )

    def get_offset(
        self, group: str, topic: str, queue_id: int, *, broker: str | None = None
    ) -> int:
        """The offset ``group`` committed in the queue."""
        request = service_pb2.GetOffsetRequest(
            group=self.transport.resource(group),
            message_queue=convert.message_queue(topic, queue_id),
        )
        return int(self.transport.call("GetOffset", request).offset)

    def update_offset(
        self, group: str, topic: str, queue_id: int, offset: int, *, broker: str | None = None
    ) -> None:
        """Commit ``offset`` (the next message to consume) for ``group`` in the queue."""
        request = service_pb2.UpdateOffsetRequest(
            group=self.transport.resource(group),
            message_queue=convert.message_queue(topic, queue_id),
            offset=offset,
        )
        self.transport.call("UpdateOffset", request)

    def query_offset(
        self,
        topic: str,
        queue_id: int,
        policy: str = "END",
        *,
        timestamp_ms: int | None = None,
        broker: str | None = None,
    ) -> int:
        """The queue's first offset (BEGINNING), next offset (END), or the first offset
        stored at or after ``timestamp_ms`` (TIMESTAMP)."""
        if policy not in QUERY_POLICIES:
            raise InvalidArgumentError(f"policy must be one of {sorted(QUERY_POLICIES)}")
        if (policy == "TIMESTAMP") != (timestamp_ms is not None):
            raise InvalidArgumentError("timestamp_ms goes with policy TIMESTAMP, and only it")
        request = service_pb2.QueryOffsetRequest(
            message_queue=convert.message_queue(topic, queue_id),
            query_offset_policy=QUERY_POLICIES[policy],
        )
        if timestamp_ms is not None:
            request.timestamp.FromMilliseconds(timestamp_ms)
        return int(self.transport.call("QueryOffset", request).offset)
