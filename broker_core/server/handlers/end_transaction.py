"""EndTransaction: commit or roll back a half message, by message id and transaction id.

Sent by the producer after its local transaction (source CLIENT), or in answer to a
check-back we pushed over Telemetry (source SERVER_CHECK). A commit makes the message
visible in its topic; a rollback discards it. A message with no unresolved half (unknown,
or ended before) is MESSAGE_NOT_FOUND; a transaction id that is not the half's is
INVALID_TRANSACTION_ID; a missing message id is ILLEGAL_MESSAGE_ID, an unspecified
resolution BAD_REQUEST.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.errors import (
    InvalidArgumentError,
    InvalidMessageIdError,
    InvalidTransactionIdError,
)
from broker_core.message import validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server.context import ServerContext

_RESOLUTIONS = {pb.TransactionResolution.COMMIT: True, pb.TransactionResolution.ROLLBACK: False}


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """End the transaction; answer OK."""
    validate_topic_name(request.topic.name)
    if not request.message_id:
        raise InvalidMessageIdError("EndTransaction needs the message id")
    if not request.transaction_id:
        raise InvalidTransactionIdError("EndTransaction needs the transaction id")
    if request.resolution not in _RESOLUTIONS:
        raise InvalidArgumentError(
            f"resolution must be COMMIT or ROLLBACK, got {request.resolution}"
        )
    from_check = request.source == pb.TransactionSource.SOURCE_SERVER_CHECK
    ctx.broker.end_transaction(
        request.message_id,
        request.transaction_id,
        _RESOLUTIONS[request.resolution],
        from_check=from_check,
    )
    return service_pb2.EndTransactionResponse(status=ok())
