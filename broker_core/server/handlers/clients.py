"""The client family: ``Heartbeat``, ``NotifyClientTermination`` and ``SyncLiteSubscription``,
how a client keeps (and ends) its registration with the broker. The client is named by
the ``x-mq-client-id`` header. (Telemetry, the client's session stream, is
``telemetry.py``.)

**Heartbeat**: a client says it is alive (every 10 s for the official clients). A
consumer is registered under its group (from the request) with the topics its Telemetry
settings subscribe; a producer under every topic it publishes (RocketMQ 5 producers have
no group: the topic serves as one). A client whose settings have not arrived yet is still
answered OK; a consumer is then registered under its group without topics, a producer
not at all.

**NotifyClientTermination**: a client is shutting down. It is unregistered from every
group it had (the request's consumer group, and the groups its Telemetry settings gave
it), so its queues go to the rest of the group at once instead of after the heartbeat
expiry. Its session is forgotten: no more commands are routed to it, and its stream ends
when the client closes it (or a few seconds later). Idempotent: an unknown client is
answered OK as well.

**SyncLiteSubscription**: a lite consumer says which lite topics of its bound topic it
wants. Request → ``Consuming.sync_lite_subscription(group, client id, topic, action,
lite_topic_set)`` (policy in ``broker_core.broker.lite``); BAD_REQUEST without the client
id header. Answers OK; BAD_REQUEST when the topic is not a LITE topic, TOPIC_NOT_FOUND
when it does not exist, ILLEGAL_LITE_TOPIC for a bad lite topic name,
LITE_SUBSCRIPTION_QUOTA_EXCEEDED past the quota (the client's set is unchanged then).
``version`` and ``offset_option`` are accepted and ignored: a lite topic new to a group
is read from its first message.
"""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext


def _profile(
    ctx: ServerContext, request: service_pb2.HeartbeatRequest, client_id: str
) -> sessions.Profile | None:
    """The profile to register: the session's, corrected by what the request says."""
    session = sessions.get(ctx, client_id)
    known = session.profile if session else None
    group = request.group.name if request.HasField("group") else ""
    if request.client_type == pb.ClientType.CLIENT_TYPE_UNSPECIFIED:
        kind: sessions.Kind = known.kind if known else ("consumer" if group else "producer")
    else:
        kind = sessions.kind_of(request.client_type)
    if kind == "producer":
        return known if known is not None and known.kind == "producer" else None
    validate_group_name(group)
    if known is not None and known.kind == "consumer" and known.group == group:
        return known
    return sessions.Profile("consumer", group, frozenset())


def heartbeat(
    ctx: ServerContext, request: service_pb2.HeartbeatRequest, context: grpc.ServicerContext
) -> service_pb2.HeartbeatResponse:
    """Refresh the client's registration; answer OK."""
    client_id = sessions.client_id_of(context)
    profile = _profile(ctx, request, client_id)
    if profile is not None:
        sessions.heartbeat(ctx, client_id, profile)
    return service_pb2.HeartbeatResponse(status=ok())


def notify_client_termination(
    ctx: ServerContext,
    request: service_pb2.NotifyClientTerminationRequest,
    context: grpc.ServicerContext,
) -> service_pb2.NotifyClientTerminationResponse:
    """Unregister the client and drop its session; answer OK."""
    client_id = sessions.client_id_of(context)
    group = request.group.name if request.HasField("group") else ""
    if group:
        validate_group_name(group)
    sessions.terminate(ctx, client_id, group)
    return service_pb2.NotifyClientTerminationResponse(status=ok())


def sync_lite_subscription(
    ctx: ServerContext,
    request: service_pb2.SyncLiteSubscriptionRequest,
    context: grpc.ServicerContext,
) -> service_pb2.SyncLiteSubscriptionResponse:
    """Apply the subscription change; see the module docstring for the statuses."""
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.topic.name)
    ctx.broker.consuming.sync_lite_subscription(
        group, sessions.client_id_of(context), topic, request.action, list(request.lite_topic_set)
    )
    return service_pb2.SyncLiteSubscriptionResponse(status=ok())
