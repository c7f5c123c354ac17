"""``rmq.bulk.v1.Bulk/PullRaw``: offset pull that ships stored units, for bulk readers.

``MessagingService.PullMessage`` answers with one protobuf ``Message`` per message, which
is what RocketMQ clients expect and what costs most when a reader wants a million rows
(building the protobuf, then taking it apart again). Our own client's bulk path (the
Spark source, backlog drains) asks this service instead and decodes the units as columns
(``broker_core.client.columnar``); the same broker checks, filters and long polling
apply, through ``Broker.pull`` with a raw ``PullRequest``.

Request: one UTF-8 JSON object (unknown fields are BAD_REQUEST)::

    group                    consumer group (must exist, as for PullMessage)
    topic, queue_id, offset  the queue and the first offset wanted
    max_count                units wanted (the broker caps it at max_raw_pull_batch)
    max_bytes?               byte budget of the units (default 8 MiB, at most 32 MiB);
                             at least one unit is sent when one is found
    filter_type?, filter_expression?   "TAG" (default) or "SQL", as PullMessage's filter
    long_polling_timeout_ms? wait this long at the end of the queue (within the deadline)

Response bytes::

    offset   size      field
    0        4         header_length N       uint32, big-endian
    4        N         header                UTF-8 JSON: {"status": {"code", "message"},
                                             "next_offset", "min_offset", "max_offset",
                                             "count"}
    4+N      4·count   unit sizes            int32, big-endian, one per unit
    …        rest      units                 back to back, exactly as in the commitlog

``status.code`` is an ``apache.rocketmq.v2.Code``: OK with units; MESSAGE_NOT_FOUND when
nothing new or nothing matched; ILLEGAL_OFFSET for an offset outside the queue (then
``next_offset`` is where to go); any other code for a refused request (``count`` 0).
No exception escapes; the units are not verified here — readers check every unit's CRCs
and offsets (see ``broker_core.store.raw_read``).
"""

from __future__ import annotations

import json
import logging
import struct
from typing import Any, Final

import grpc

from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.errors import InvalidArgumentError, MessageNotFoundError, RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.bulk_send import SEND_METHOD
from broker_core.protocol.filters import SQL92, TAG, MessageFilter
from broker_core.protocol.status import ok, status_of
from broker_core.server.admin import Args, parse_request
from broker_core.server.bulk_send import send_bulk
from broker_core.server.context import ServerContext
from broker_core.server.handlers.receive_message import polling_budget_ms

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "rmq.bulk.v1.Bulk"
METHOD: Final = "PullRaw"
DEFAULT_MAX_BYTES: Final = 8 << 20
MAX_BYTES_LIMIT: Final = 32 << 20
HEADER_LENGTH: Final = struct.Struct(">I")
FIELDS: Final = frozenset(
    {
        "group",
        "topic",
        "queue_id",
        "offset",
        "max_count",
        "max_bytes",
        "filter_type",
        "filter_expression",
        "long_polling_timeout_ms",
    }
)


def _filter(args: Args) -> MessageFilter | None:
    kind = (args.text("filter_type") or "TAG").upper()
    if kind not in ("TAG", "SQL"):
        raise InvalidArgumentError(f"PullRaw: filter_type must be TAG or SQL, got {kind!r}")
    expression = args.text("filter_expression") or ""
    if not expression.strip():
        if kind == "SQL":
            raise InvalidArgumentError("PullRaw: an SQL filter needs an expression")
        return None
    flt = MessageFilter(SQL92 if kind == "SQL" else TAG, expression)
    return None if flt.match_all else flt


def _pull(ctx: ServerContext, args: Args, context: grpc.ServicerContext) -> PullResult:
    group = validate_group_name(args.text("group", required=True))
    topic = validate_topic_name(args.text("topic", required=True))
    queue_id = args.integer("queue_id", required=True, minimum=0)
    offset = args.integer("offset", required=True)
    max_count = args.integer("max_count", required=True, minimum=1)
    max_bytes = args.integer("max_bytes", minimum=1) or DEFAULT_MAX_BYTES
    requested_ms = args.integer("long_polling_timeout_ms", minimum=0) or 0
    request = PullRequest(
        topic,
        queue_id,
        offset,
        max_count,
        filter=_filter(args),
        max_bytes=min(max_bytes, MAX_BYTES_LIMIT),
        raw=True,
    )
    return ctx.broker.pull(group, request, timeout_ms=polling_budget_ms(context, requested_ms))


def _frame(header: dict[str, Any], sizes: bytes = b"", units: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join((HEADER_LENGTH.pack(len(head)), head, sizes, units))


def _status(code_and_message: Any) -> dict[str, Any]:
    return {"code": int(code_and_message.code), "message": code_and_message.message}


def answer(result: PullResult) -> bytes:
    """The response bytes for one pull's result (see the module docstring)."""
    bounds = {
        "next_offset": result.next_offset,
        "min_offset": result.min_offset,
        "max_offset": result.max_offset,
    }
    raw = result.raw
    if result.status is PullStatus.FOUND and raw is not None and raw.count:
        header = {"status": _status(ok()), "count": raw.count, **bounds}
        return _frame(header, raw.sizes.astype(">i4").tobytes(), raw.data)
    if result.error is not None:
        return _frame({"status": _status(status_of(result.error)), "count": 0, **bounds})
    reason = (
        "no message matched the filter"
        if result.status is PullStatus.NO_MATCHED_MESSAGE
        else "no new message"
    )
    return _frame(
        {"status": _status(status_of(MessageNotFoundError(reason))), "count": 0, **bounds}
    )


def pull_raw(ctx: ServerContext, request: bytes, context: grpc.ServicerContext) -> bytes:
    """Answer one PullRaw call; never raises (errors become statuses)."""
    try:
        args = Args(METHOD, parse_request(METHOD, request), FIELDS)
        result = _pull(ctx, args, context)
        if ctx.metrics is not None and result.raw is not None and result.raw.count:
            ctx.metrics.messages_out(
                args.text("topic"), args.text("group"), result.raw.count, len(result.raw.data)
            )  # bulk pulls count stored bytes
        return answer(result)
    except Exception as exc:
        if isinstance(exc, RocketMQError):
            log.info("PullRaw refused: %s", exc)
        else:
            log.exception("PullRaw failed")
        return _frame({"status": _status(status_of(exc)), "count": 0})


def _identity(raw: bytes) -> bytes:
    return raw


def bulk_handler(ctx: ServerContext) -> grpc.GenericRpcHandler:
    """The bulk service (PullRaw and SendBulk) for ``BrokerServer.add_generic_handlers``."""
    method = grpc.unary_unary_rpc_method_handler(
        lambda request, context: pull_raw(ctx, request, context),
        request_deserializer=_identity,
        response_serializer=_identity,
    )
    send = grpc.unary_unary_rpc_method_handler(
        lambda request, context: send_bulk(ctx, request, context),
        request_deserializer=_identity,
        response_serializer=_identity,
    )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {METHOD: method, SEND_METHOD: send})
