"""``rmq.bulk.v1.Bulk/SendBulk``: a batch of plain messages sent as columns (see
:mod:`broker_core.protocol.bulk_send` for the frames).

Decoded and checked by ``convert_bulk``, then stored by ``Broker.send_columns`` — the
path SendMessage's plain batches take — so a bulk send and a SendMessage of the same
messages store the same bytes. No exception escapes: errors become the response status.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from broker_core.errors import RocketMQError
from broker_core.protocol.bulk_send import decode_request, encode_response
from broker_core.protocol.status import ok, status_of
from broker_core.server.context import ServerContext
from broker_core.server.convert_bulk import Limits, to_column_batch
from broker_core.server.convert_in import peer_address
from broker_core.store.message_store import now_ms

log = logging.getLogger(__name__)


def _status(status: Any) -> dict[str, Any]:
    return {"code": int(status.code), "message": status.message}


def send_bulk(ctx: ServerContext, request: bytes, context: grpc.ServicerContext) -> bytes:
    """Store one SendBulk batch whole, or refuse it whole; answer its queue offsets."""
    try:
        store_config = ctx.broker.store.config
        limits = Limits(store_config.max_body_bytes, store_config.max_properties_bytes)
        batch = to_column_batch(
            decode_request(request),
            limits=limits,
            peer=peer_address(context.peer()),
            now_ms=now_ms(),
        )
        return encode_response(_status(ok()), ctx.broker.send_columns(batch))
    except Exception as exc:
        if isinstance(exc, RocketMQError):
            log.info("SendBulk refused: %s", exc)
        else:
            log.exception("SendBulk failed")
        return encode_response(_status(status_of(exc)), [])
