"""Heartbeat: a client says it is alive (every 10 s for the official clients).

The client id comes from the ``x-mq-client-id`` header. A consumer is registered under
its group (from the request) with the topics its Telemetry settings subscribe; a producer
under every topic it publishes (RocketMQ 5 producers have no group: the topic serves as
one). A client whose settings have not arrived yet is still answered OK; a consumer is
then registered under its group without topics, a producer not at all.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.message import validate_group_name
from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext


def _profile(ctx: ServerContext, request: Any, client_id: str) -> sessions.Profile | None:
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


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Refresh the client's registration; answer OK."""
    client_id = sessions.client_id_of(context)
    profile = _profile(ctx, request, client_id)
    if profile is not None:
        sessions.heartbeat(ctx, client_id, profile)
    return service_pb2.HeartbeatResponse(status=ok())
