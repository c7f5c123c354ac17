"""RecallMessage: cancel a timed message before its delivery time, by its recall handle.

The recall handle is what SendMessage answered for a message with a future delivery
timestamp. Recalled, the message is never delivered; the answer carries its message id.
A handle with no pending timed message (never sent, already delivered or recalled) is
NOT_FOUND; an empty or malformed handle is BAD_REQUEST.
"""

from __future__ import annotations

import re
from typing import Any, Final

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.errors import InvalidArgumentError, NotFoundError
from broker_core.message import validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server.context import ServerContext

# Handles are the timed message's id: printable, no separators the store reserves.
_HANDLE_RE: Final = re.compile(r"^[\x21-\x7e]{1,128}$")


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Cancel the timed message; answer with its id."""
    topic = validate_topic_name(request.topic.name)
    recall_handle = request.recall_handle
    if not recall_handle:
        raise InvalidArgumentError("RecallMessage needs the recall handle")
    if not _HANDLE_RE.match(recall_handle):
        raise InvalidArgumentError(f"malformed recall handle {recall_handle[:40]!r}")
    if not ctx.broker.recall(recall_handle):
        raise NotFoundError(
            f"no pending timed message of topic {topic} for recall handle {recall_handle}: "
            "it was delivered or recalled already, or never sent"
        )
    return service_pb2.RecallMessageResponse(status=ok(), message_id=recall_handle)
