"""The route family: ``QueryRoute`` and ``QueryAssignment``, where a client finds queues.

**QueryRoute**: a topic's message queues: this broker's, or the cluster's with
NameServers. Every queue id below ``max(read_queue_nums, write_queue_nums)`` is listed
once, with the permission it really has: READ if consumers may read it (id below the read
count and the topic readable), WRITE if producers may write it, READ_WRITE for both. The
broker is ``ctx.broker_name`` with id 0 (the master) at ``ctx.endpoint``; a wildcard
advertised host (``0.0.0.0``) is replaced by the address the client reached us at. A topic
that does not exist is TOPIC_NOT_FOUND: a route lookup never creates a topic (a
consumer's typo must not); auto-creation belongs to sends (``auto_create_topics``), as in
RocketMQ 5.

**QueryAssignment**: the queues of a topic this push consumer should receive from. The
official push consumers ask every few seconds and run one receive loop per assigned
queue, each asking for that queue's id. We share the topic's readable queues among the
group's live consumers with the group's rebalance strategy (``ConsumerGroups.assignment``), so in
clustering mode every queue has exactly one consumer in the group; a broadcasting group
gives every consumer every queue. A consumer the broker does not know yet (its Telemetry
settings are still on their way) is registered by this call, so it is never starved of
queues. Only readable queues are assigned.

With NameServers (``ctx.routes``), both answers list every broker group's queues, each
with its own broker (see ``server/cluster_view.py``). Both build their queues with
``common.message_queue_proto``, so the two agree on every field (the client compares them).
"""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.topics import TopicConfig
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.handlers.common import broker_proto, message_queue_proto


def topic_for_route(ctx: ServerContext, name: str) -> TopicConfig:
    """The topic's config (InvalidTopicError for a bad name, TopicNotFoundError when it
    does not exist: a route lookup never creates a topic)."""
    validate_topic_name(name)
    return ctx.broker.topics.require(name)


def query_route(
    ctx: ServerContext, request: service_pb2.QueryRouteRequest, context: grpc.ServicerContext
) -> service_pb2.QueryRouteResponse:
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


def _ensure_member(ctx: ServerContext, group: str, topic: str, client_id: str) -> None:
    """Register ``client_id`` as a consumer of ``topic`` in ``group`` if it is not yet."""
    if client_id in ctx.broker.clients.consumers(group, topic):
        return
    session = sessions.get(ctx, client_id)
    profile = session.profile if session else None
    topics = {topic}
    if profile is not None and profile.kind == "consumer" and profile.group == group:
        topics |= profile.topics
    ctx.broker.consumer_groups.heartbeat(group, client_id, topics=sorted(topics), kind="consumer")


def query_assignment(
    ctx: ServerContext,
    request: service_pb2.QueryAssignmentRequest,
    context: grpc.ServicerContext,
) -> service_pb2.QueryAssignmentResponse:
    """Answer with the consumer's share of the topic's queues."""
    topic = validate_topic_name(request.topic.name)
    group = validate_group_name(request.group.name)
    client_id = sessions.client_id_of(context)
    access_point = request.endpoints if request.HasField("endpoints") else None
    namespace = request.topic.resource_namespace
    if ctx.routes is not None:
        from broker_core.server.cluster_view import assignment_queues

        _ensure_member(ctx, group, topic, client_id)
        queues = assignment_queues(ctx, group, topic, client_id, namespace, access_point)
        return service_pb2.QueryAssignmentResponse(
            status=ok(), assignments=[pb.Assignment(message_queue=q) for q in queues]
        )
    config = ctx.broker.topic_for_read(topic)
    _ensure_member(ctx, group, topic, client_id)
    broker = broker_proto(ctx, access_point)
    assignments = [
        pb.Assignment(message_queue=message_queue_proto(config, mq.queue_id, broker, namespace))
        for mq in ctx.broker.consumer_groups.assignment(group, topic, client_id)
    ]
    return service_pb2.QueryAssignmentResponse(status=ok(), assignments=assignments)
