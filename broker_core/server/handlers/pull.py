"""The pull family: offset-based reads of one queue, ``PullMessage`` and ``PullRaw``.

Both run ``Pulling.pull(group, PullRequest(...), timeout_ms=…)`` with the same broker
checks, filters (``common.message_filter`` / ``common.text_filter``: an unknown filter
type is ILLEGAL_FILTER_EXPRESSION on both) and long polling (``common.polling_budget_ms``:
a pull at the end of the queue waits for new messages, and answers before the gRPC
deadline). Nothing is made invisible and no offset is committed: the consumer keeps its
position (and may store it with UpdateOffset). ``next_offset`` is where the next pull
starts (after the last unit inspected).

**PullMessage** (MessagingService, server streaming) answers with one protobuf
``Message`` per message, as RocketMQ's proxy writes it (``PullMessageResponseStreamWriter``)::

    status OK, one ``message`` per message, ``next_offset``    messages found
    status MESSAGE_NOT_FOUND, ``next_offset``                  nothing new / nothing matched
    status ILLEGAL_OFFSET, ``next_offset``                     offset outside [min, max]:
                                                               next_offset is where to go
    status <error code>                                        a refused request

A negative offset is ILLEGAL_OFFSET, a queue the topic does not have or a batch size
below 1 is BAD_REQUEST.

**PullRaw** (``rmq.bulk.v1.Bulk/PullRaw``) ships the stored units instead. Building one
protobuf ``Message`` per message, then taking it apart again, is what costs most when a
reader wants a million rows; our own client's bulk path (the Spark source, backlog
drains) asks this method and decodes the units as columns (``broker_core.client.columnar``).

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
from collections.abc import Iterator
from typing import Final

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.errors import MessageNotFoundError, RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import to_pb_message
from broker_core.server.handlers.common import (
    message_filter,
    polling_budget_ms,
    requested_polling_ms,
    text_filter,
)
from broker_core.server.json_args import Args, Json, parse_request, status_json

log = logging.getLogger(__name__)

Response = service_pb2.PullMessageResponse

RAW_METHOD: Final = "PullRaw"
DEFAULT_MAX_BYTES: Final = 8 << 20
MAX_BYTES_LIMIT: Final = 32 << 20
HEADER_LENGTH: Final = struct.Struct(">I")
RAW_FIELDS: Final = frozenset(
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


def _not_found(result: PullResult) -> MessageNotFoundError:
    """Why an empty pull found nothing, as both paths word it."""
    if result.status is PullStatus.NO_MATCHED_MESSAGE:
        return MessageNotFoundError("no message matched the filter")
    return MessageNotFoundError("no new message")


# ---- PullMessage --------------------------------------------------------------------------


def pull_message(
    ctx: ServerContext, request: service_pb2.PullMessageRequest, context: grpc.ServicerContext
) -> Iterator[service_pb2.PullMessageResponse]:
    """Stream the answer to one PullMessageRequest (see the module docstring)."""
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.message_queue.topic.name)
    if request.batch_size < 1:
        yield Response(status=bad_request(f"batch_size must be ≥ 1, got {request.batch_size}"))
        return
    flt = message_filter(request.filter_expression)
    requested = requested_polling_ms(request) or 0  # none named: look once, do not wait
    wanted = PullRequest(
        topic, request.message_queue.id, request.offset, request.batch_size, filter=flt
    )
    result = ctx.broker.pulling.pull(
        group, wanted, timeout_ms=polling_budget_ms(context, requested)
    )
    if result.status is PullStatus.FOUND:
        if ctx.metrics is not None:
            ctx.metrics.messages_out(
                topic, group, len(result.messages), sum(len(m.body) for m in result.messages)
            )
        yield Response(status=ok())
        for msg in result.messages:
            yield Response(message=to_pb_message(msg))
    elif result.error is not None:
        yield Response(status=status_of(result.error))
    else:
        yield Response(status=status_of(_not_found(result)))
    yield Response(next_offset=result.next_offset)


# ---- PullRaw ------------------------------------------------------------------------------


def _raw_pull(ctx: ServerContext, args: Args, context: grpc.ServicerContext) -> PullResult:
    group = validate_group_name(args.text("group", required=True))
    topic = validate_topic_name(args.text("topic", required=True))
    queue_id = args.integer("queue_id", required=True, minimum=0)
    offset = args.integer("offset", required=True)
    max_count = args.integer("max_count", required=True, minimum=1)
    max_bytes = args.integer("max_bytes", minimum=1) or DEFAULT_MAX_BYTES
    requested_ms = args.integer("long_polling_timeout_ms", minimum=0) or 0
    flt = text_filter(args.text("filter_type"), args.text("filter_expression"))
    request = PullRequest(
        topic,
        queue_id,
        offset,
        max_count,
        filter=flt,
        max_bytes=min(max_bytes, MAX_BYTES_LIMIT),
        raw=True,
    )
    return ctx.broker.pulling.pull(
        group, request, timeout_ms=polling_budget_ms(context, requested_ms)
    )


def raw_frame(header: Json, sizes: bytes = b"", units: bytes = b"") -> bytes:
    """One PullRaw response (also how the Bulk service answers a refused call)."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join((HEADER_LENGTH.pack(len(head)), head, sizes, units))


def raw_answer(result: PullResult) -> bytes:
    """The response bytes for one pull's result (see the module docstring)."""
    bounds = {
        "next_offset": result.next_offset,
        "min_offset": result.min_offset,
        "max_offset": result.max_offset,
    }
    raw = result.raw
    if result.status is PullStatus.FOUND and raw is not None and raw.count:
        header = {"status": status_json(ok()), "count": raw.count, **bounds}
        return raw_frame(header, raw.sizes.astype(">i4").tobytes(), raw.data)
    problem = result.error if result.error is not None else _not_found(result)
    return raw_frame({"status": status_json(status_of(problem)), "count": 0, **bounds})


def pull_raw(ctx: ServerContext, request: bytes, context: grpc.ServicerContext) -> bytes:
    """Answer one PullRaw call; never raises (errors become statuses)."""
    try:
        args = Args(RAW_METHOD, parse_request(RAW_METHOD, request), RAW_FIELDS)
        result = _raw_pull(ctx, args, context)
        if ctx.metrics is not None and result.raw is not None and result.raw.count:
            ctx.metrics.messages_out(
                args.text("topic", required=True),
                args.text("group", required=True),
                result.raw.count,
                len(result.raw.data),
            )  # bulk pulls count stored bytes
        return raw_answer(result)
    except Exception as exc:
        if isinstance(exc, RocketMQError):
            log.info("PullRaw refused: %s", exc)
        else:
            log.exception("PullRaw failed")
        return raw_frame({"status": status_json(status_of(exc)), "count": 0})
