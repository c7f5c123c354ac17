"""``PullMessage`` (server streaming): offset-based read of one queue for pull consumers.

Request → ``Broker.pull(group, PullRequest(topic, queue_id, offset, batch_size, filter=…),
timeout_ms=…)``. Nothing is made invisible and no offset is committed: the consumer
keeps its position (and may store it with UpdateOffset). The stream, as RocketMQ's
proxy writes it (``PullMessageResponseStreamWriter``)::

    status OK, one ``message`` per message, ``next_offset``    messages found
    status MESSAGE_NOT_FOUND, ``next_offset``                  nothing new / nothing matched
    status ILLEGAL_OFFSET, ``next_offset``                     offset outside [min, max]:
                                                               next_offset is where to go
    status <error code>                                        a refused request

``next_offset`` is where the next pull starts (after the last unit inspected). With a
``long_polling_timeout`` a pull at the end of the queue waits for new messages, and
answers before the gRPC deadline. A negative offset is ILLEGAL_OFFSET, a queue the topic
does not have or a batch size below 1 is BAD_REQUEST.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.pull import PullRequest, PullStatus
from broker_core.errors import MessageNotFoundError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import ms_of_duration, to_pb_message
from broker_core.server.handlers.receive_message import message_filter, polling_budget_ms

Response = service_pb2.PullMessageResponse


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
    """Stream the answer to one PullMessageRequest (see the module docstring)."""
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.message_queue.topic.name)
    if request.batch_size < 1:
        yield Response(status=bad_request(f"batch_size must be ≥ 1, got {request.batch_size}"))
        return
    flt = message_filter(request.filter_expression)
    requested = (
        ms_of_duration(request.long_polling_timeout)
        if request.HasField("long_polling_timeout")
        else 0
    )
    wanted = PullRequest(
        topic, request.message_queue.id, request.offset, request.batch_size, filter=flt
    )
    result = ctx.broker.pull(group, wanted, timeout_ms=polling_budget_ms(context, requested))
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
        reason = (
            "no new message"
            if result.status is PullStatus.NO_NEW_MESSAGE
            else ("no message matched the filter")
        )
        yield Response(status=status_of(MessageNotFoundError(reason)))
    yield Response(next_offset=result.next_offset)
