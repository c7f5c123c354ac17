"""QueryRoute: a topic's message queues: this broker's, or the cluster's with NameServers.

Every queue id below ``max(read_queue_nums, write_queue_nums)`` is listed once, with the
permission it really has: READ if consumers may read it (id below the read count and the
topic readable), WRITE if producers may write it, READ_WRITE for both. The broker is
``ctx.broker_name`` with id 0 (the master) at ``ctx.endpoint``; a wildcard advertised
host (``0.0.0.0``) is replaced by the address the client reached us at. A topic that does
not exist is TOPIC_NOT_FOUND: a route lookup never creates a topic (a consumer's typo must
not); auto-creation belongs to sends (``auto_create_topics``), as in RocketMQ 5.

With NameServers (``ctx.routes``), the answer lists every broker group's queues, each
with its own broker (see ``server/cluster_view.py``).

The same :func:`message_queue_proto` builds the queues of QueryAssignment, so the two
agree on every field (the client compares them).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.topics import MIXED, Perm, TopicConfig
from broker_core.message import validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server.context import ServerContext

Type = pb.MessageType
ACCEPTED_TYPES: Final[dict[str, tuple[int, ...]]] = {
    MIXED: (Type.NORMAL, Type.FIFO, Type.DELAY, Type.TRANSACTION, Type.PRIORITY),
    "NORMAL": (Type.NORMAL,),
    "FIFO": (Type.FIFO,),
    "DELAY": (Type.DELAY,),
    "TRANSACTION": (Type.TRANSACTION,),
    "PRIORITY": (Type.PRIORITY,),
    "LITE": (Type.LITE,),
}
_WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", "[::]", ""})


def scheme_of(host: str) -> int:
    """The protocol's address scheme of a host (IPv4, IPv6 or a domain name)."""
    try:
        version = ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return int(pb.AddressScheme.DOMAIN_NAME)
    return int(pb.AddressScheme.IPv4 if version == 4 else pb.AddressScheme.IPv6)


def broker_endpoints(ctx: ServerContext, access_point: Any | None = None) -> Any:
    """This broker's ``Endpoints``: the advertised host:port, or the client's access point
    when we advertise a wildcard address or run in controller mode (the client dialled
    the group; a slave forwards its sends to the master: ``server/master_forward.py``)."""
    host, port = ctx.host, ctx.port
    dialled_group = ctx.master_endpoint is not None  # controller mode: see master_forward
    dialled = access_point is not None and access_point.addresses
    if (host in _WILDCARD_HOSTS or dialled_group) and dialled:
        return access_point
    return pb.Endpoints(
        scheme=scheme_of(host), addresses=[pb.Address(host=host.strip("[]"), port=port)]
    )


def broker_proto(ctx: ServerContext, access_point: Any | None = None) -> Any:
    """This broker as the protocol's ``Broker`` (id 0: RocketMQ's master id)."""
    return pb.Broker(name=ctx.broker_name, id=0, endpoints=broker_endpoints(ctx, access_point))


def permission(config: TopicConfig, queue_id: int) -> int:
    """The protocol permission of one queue (NONE when it is neither readable nor writable)."""
    readable = queue_id < config.read_queue_nums and Perm.readable(config.perm)
    writable = queue_id < config.write_queue_nums and Perm.writeable(config.perm)
    if readable and writable:
        return int(pb.Permission.READ_WRITE)
    if readable:
        return int(pb.Permission.READ)
    return int(pb.Permission.WRITE if writable else pb.Permission.NONE)


def message_queue_proto(
    config: TopicConfig, queue_id: int, broker: Any, namespace: str = ""
) -> Any:
    """One queue of the topic as the protocol's ``MessageQueue``."""
    return pb.MessageQueue(
        topic=pb.Resource(name=config.name, resource_namespace=namespace),
        id=queue_id,
        permission=permission(config, queue_id),
        broker=broker,
        accept_message_types=ACCEPTED_TYPES[config.message_type],
    )


def topic_for_route(ctx: ServerContext, name: str) -> TopicConfig:
    """The topic's config (InvalidTopicError for a bad name, TopicNotFoundError when it
    does not exist: a route lookup never creates a topic)."""
    validate_topic_name(name)
    return ctx.broker.topics.require(name)


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Answer with every queue of the topic that can be read or written."""
    access_point = request.endpoints if request.HasField("endpoints") else None
    namespace = request.topic.resource_namespace
    if ctx.routes is not None:
        from broker_core.server.cluster_view import route_queues

        validate_topic_name(request.topic.name)
        return service_pb2.QueryRouteResponse(
            status=ok(),
            message_queues=route_queues(ctx, request.topic.name, namespace, access_point),
        )
    config = topic_for_route(ctx, request.topic.name)
    broker = broker_proto(ctx, access_point)
    queues = [
        message_queue_proto(config, q, broker, namespace)
        for q in range(max(config.read_queue_nums, config.write_queue_nums))
    ]
    return service_pb2.QueryRouteResponse(
        status=ok(), message_queues=[q for q in queues if q.permission != pb.Permission.NONE]
    )
