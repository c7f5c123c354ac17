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
below 1 is BAD_REQUEST (:mod:`broker_core.protocol.pull_args`).

**PullRaw** (``rmq.bulk.v1.Bulk/PullRaw``) ships the stored units instead, for our own
client's bulk reads: its request and response frames are drawn and coded in
:mod:`broker_core.protocol.pull_raw`. No exception escapes it: a refused request is a
frame with the error's status.

The arguments' rules (offset, queue id, counts) are checked in one place for every way
in, when the ``PullRequest`` is built (:mod:`broker_core.protocol.pull_args`); the
handlers only parse their fields.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
import numpy as np
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.errors import MessageNotFoundError, RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.pull_raw import (
    DEFAULT_MAX_BYTES,
    MAX_BYTES_LIMIT,
    PULL_METHOD,
    REQUEST_FIELDS,
    encode_refusal,
    encode_response,
)
from broker_core.protocol.status import ok, status_of
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import to_pb_message
from broker_core.server.handlers.common import (
    message_filter,
    polling_budget_ms,
    requested_polling_ms,
    text_filter,
)
from broker_core.server.json_args import Args, parse_request, status_json

log = logging.getLogger(__name__)

Response = service_pb2.PullMessageResponse
_NO_SIZES = np.zeros(0, np.int32)


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
    queue_id = args.integer("queue_id", required=True)
    offset = args.integer("offset", required=True)
    max_count = args.integer("max_count", required=True)
    max_bytes = args.integer("max_bytes")
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else min(max_bytes, MAX_BYTES_LIMIT)
    requested_ms = args.integer("long_polling_timeout_ms", minimum=0) or 0
    flt = text_filter(args.text("filter_type"), args.text("filter_expression"))
    request = PullRequest(
        topic,
        queue_id,
        offset,
        max_count,
        filter=flt,
        max_bytes=max_bytes,
        raw=True,
    )
    return ctx.broker.pulling.pull(
        group, request, timeout_ms=polling_budget_ms(context, requested_ms)
    )


def raw_answer(result: PullResult) -> bytes:
    """The response bytes for one pull's result (see the module docstring)."""
    bounds = {
        "next_offset": result.next_offset,
        "min_offset": result.min_offset,
        "max_offset": result.max_offset,
    }
    raw = result.raw
    if result.status is PullStatus.FOUND and raw is not None and raw.count:
        return encode_response(status_json(ok()), raw.sizes, raw.data, **bounds)
    problem = result.error if result.error is not None else _not_found(result)
    return encode_response(status_json(status_of(problem)), _NO_SIZES, b"", **bounds)


def pull_raw(ctx: ServerContext, request: bytes, context: grpc.ServicerContext) -> bytes:
    """Answer one PullRaw call; never raises (errors become statuses)."""
    try:
        args = Args(PULL_METHOD, parse_request(PULL_METHOD, request), REQUEST_FIELDS)
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
        return encode_refusal(status_json(status_of(exc)))
