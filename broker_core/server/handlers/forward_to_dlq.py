"""``ForwardMessageToDeadLetterQueue``: the client gave up on a delivery.

The message named by ``receipt_handle`` is copied to ``%DLQ%{group}`` (created on first
use) and its delivery ends, as if acked; the handle is stale afterwards. The FIFO
PushConsumer calls this once a message has failed its last allowed attempt.
``delivery_attempt`` / ``max_delivery_attempts`` in the request are informational: the
client has already decided.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.handlers.ack_message import require_group_and_topic


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Dead-letter the delivery; OK, or the mapped error (stale handle, unknown group…)."""
    group, topic = require_group_and_topic(ctx, request)
    ctx.broker.forward_to_dead_letter(
        group,
        topic,
        request.receipt_handle,
        client_id=sessions.client_id_of(context, required=False),
        lite_topic=request.lite_topic,
    )
    return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=ok())
