"""``rmq.bulk.v1.Bulk``: our own bulk service next to ``MessagingService``, for our client.

Two unary methods with byte requests and byte responses (no protobuf), registered
through ``app.Plugins.services`` (``assembly.py``):

* ``PullRaw``: offset pulls that ship the stored units (``handlers/pull.py``, beside
  PullMessage);
* ``SendBulk``: a batch of plain messages as columns (``handlers/send.py``, beside
  SendMessage).

Both handlers answer every error in their response frame; nothing escapes to gRPC.
"""

from __future__ import annotations

from typing import Final

import grpc

from broker_core.protocol.bulk_send import SEND_METHOD
from broker_core.protocol.pull_raw import PULL_METHOD
from broker_core.server.context import ServerContext
from broker_core.server.handlers.pull import pull_raw
from broker_core.server.handlers.send import send_bulk

SERVICE_NAME: Final = "rmq.bulk.v1.Bulk"


def _identity(raw: bytes) -> bytes:
    return raw


def bulk_handler(ctx: ServerContext) -> grpc.GenericRpcHandler:
    """The bulk service (PullRaw and SendBulk) for ``app.Plugins.services`` (``assembly.py``)."""
    methods = {PULL_METHOD: pull_raw, SEND_METHOD: send_bulk}
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            name: grpc.unary_unary_rpc_method_handler(
                lambda request, context, handle=handle: handle(ctx, request, context),
                request_deserializer=_identity,
                response_serializer=_identity,
            )
            for name, handle in methods.items()
        },
    )
