"""NotifyClientTermination: a client is shutting down.

The client is unregistered from every group it had (the request's consumer group, and
the groups its Telemetry settings gave it), so its queues go to the rest of the group at
once instead of after the heartbeat expiry. Its session is forgotten: no more commands
are routed to it, and its stream ends when the client closes it (or a few seconds
later). Idempotent: an unknown client is answered OK as well.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.message import validate_group_name
from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Unregister the client and drop its session; answer OK."""
    client_id = sessions.client_id_of(context)
    group = request.group.name if request.HasField("group") else ""
    if group:
        validate_group_name(group)
    sessions.terminate(ctx, client_id, group)
    return service_pb2.NotifyClientTerminationResponse(status=ok())
