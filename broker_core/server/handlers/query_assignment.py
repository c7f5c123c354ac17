"""QueryAssignment: the queues of a topic this push consumer should receive from.

The official push consumers ask every few seconds and run one receive loop per assigned
queue, each asking for that queue's id. We share the topic's readable queues among the
group's live consumers with the group's rebalance strategy (``Broker.assignment``), so
in clustering mode every queue has exactly one consumer in the group; a broadcasting
group gives every consumer every queue. A consumer the broker does not know yet (its
Telemetry settings are still on their way) is registered by this call, so it is never
starved of queues.

Only readable queues are assigned; each carries the same fields as in QueryRoute. With
NameServers, the queues of every broker group of the topic are shared (``cluster_view``).
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.handlers.query_route import broker_proto, message_queue_proto


def _ensure_member(ctx: ServerContext, group: str, topic: str, client_id: str) -> None:
    """Register ``client_id`` as a consumer of ``topic`` in ``group`` if it is not yet."""
    if client_id in ctx.broker.clients.consumers(group, topic):
        return
    session = sessions.get(ctx, client_id)
    profile = session.profile if session else None
    topics = {topic}
    if profile is not None and profile.kind == "consumer" and profile.group == group:
        topics |= profile.topics
    ctx.broker.heartbeat(group, client_id, topics=sorted(topics), kind="consumer")


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
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
        for mq in ctx.broker.assignment(group, topic, client_id)
    ]
    return service_pb2.QueryAssignmentResponse(status=ok(), assignments=assignments)
