"""The held-message family: ``EndTransaction`` and ``RecallMessage`` resolve a message the
broker holds back (a transaction's half message, a timed message) before delivery.

**EndTransaction** commits or rolls back a half message, by message id and transaction
id. Sent by the producer after its local transaction (source CLIENT), or in answer to a
check-back we pushed over Telemetry (source SERVER_CHECK). A commit makes the message
visible in its topic; a rollback discards it. A message with no unresolved half
(unknown, ended before, or of another topic than the request's: the ACL checked Pub on
the request's topic) is MESSAGE_NOT_FOUND; a transaction id that is not the half's
is INVALID_TRANSACTION_ID; a missing message id is ILLEGAL_MESSAGE_ID, an unspecified
resolution BAD_REQUEST.

**RecallMessage** cancels a timed message before its delivery time, by its recall
handle: what SendMessage answered for a message with a future delivery timestamp.
Recalled, the message is never delivered; the answer carries its message id. A handle
with no pending timed message of the request's topic (never sent, already delivered or
recalled, or of another topic: the ACL checked Pub on the request's topic) is NOT_FOUND;
an empty or malformed handle is BAD_REQUEST.
"""

from __future__ import annotations

import re
from typing import Final

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.errors import (
    InvalidArgumentError,
    InvalidMessageIdError,
    InvalidTransactionIdError,
    NotFoundError,
)
from broker_core.message import validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server.context import ServerContext

_RESOLUTIONS: Final = {
    pb.TransactionResolution.COMMIT: True,
    pb.TransactionResolution.ROLLBACK: False,
}
# Handles are the timed message's id: printable, no separators the store reserves.
_HANDLE_RE: Final = re.compile(r"^[\x21-\x7e]{1,128}$")


def end_transaction(
    ctx: ServerContext, request: service_pb2.EndTransactionRequest, context: grpc.ServicerContext
) -> service_pb2.EndTransactionResponse:
    """End the transaction; answer OK. The ACL allowed Pub on ``request.topic`` only, so
    a half of another topic is MESSAGE_NOT_FOUND, as an unknown one."""
    topic = validate_topic_name(request.topic.name)
    if not request.message_id:
        raise InvalidMessageIdError("EndTransaction needs the message id")
    if not request.transaction_id:
        raise InvalidTransactionIdError("EndTransaction needs the transaction id")
    if request.resolution not in _RESOLUTIONS:
        raise InvalidArgumentError(
            f"resolution must be COMMIT or ROLLBACK, got {request.resolution}"
        )
    from_check = request.source == pb.TransactionSource.SOURCE_SERVER_CHECK
    ctx.broker.sending.end_transaction(
        request.message_id,
        request.transaction_id,
        _RESOLUTIONS[request.resolution],
        from_check=from_check,
        topic=topic,
    )
    return service_pb2.EndTransactionResponse(status=ok())


def recall_message(
    ctx: ServerContext, request: service_pb2.RecallMessageRequest, context: grpc.ServicerContext
) -> service_pb2.RecallMessageResponse:
    """Cancel the timed message; answer with its id."""
    topic = validate_topic_name(request.topic.name)
    recall_handle = request.recall_handle
    if not recall_handle:
        raise InvalidArgumentError("RecallMessage needs the recall handle")
    if not _HANDLE_RE.match(recall_handle):
        raise InvalidArgumentError(f"malformed recall handle {recall_handle[:40]!r}")
    if not ctx.broker.sending.recall(recall_handle, topic=topic):
        raise NotFoundError(
            f"no pending timed message of topic {topic} for recall handle {recall_handle}: "
            "it was delivered or recalled already, or never sent"
        )
    return service_pb2.RecallMessageResponse(status=ok(), message_id=recall_handle)
