"""PULL_MESSAGE (11): offset pulls with long polling, re-encoded for 4.x clients.

LITE_PULL_MESSAGE (361), what a DefaultLitePullConsumer sends (sysFlag bit 4), is the same
request under another code (RocketMQ serves it by the same processor) and gets the same
answers.

Header (``PullMessageRequestHeader``): consumerGroup, topic, queueId, queueOffset, maxMsgNums,
sysFlag (bit 0 commit offset, bit 1 suspend, bit 2 subscription in this request, bit 3
class filter), commitOffset, suspendTimeoutMillis, subscription, subVersion, expressionType.

* bit 0 with ``commitOffset`` >= 0 commits the group's offset first (what 4.x push
  consumers piggy-back on their pulls).
* the filter is the request's subscription (bit 2), else the one the group's heartbeat
  gave for the topic, else every message; ``TAG`` or ``SQL92``; a bad one answers
  SUBSCRIPTION_PARSE_FAILED (23).
* bit 1 parks an empty pull up to ``suspendTimeoutMillis`` (capped by the broker's
  ``max_long_polling_ms``) in the broker's long-polling service; the answer is sent from
  the long-polling thread, so the connection's other requests go on meanwhile.

Answers, as RocketMQ's broker gives them: SUCCESS (0) with the messages in
``MessageDecoder``'s layout (:mod:`.msgcodec`); PULL_NOT_FOUND (19) when nothing is new;
PULL_RETRY_IMMEDIATELY (20) when everything read was filtered out; PULL_OFFSET_MOVED (21)
for an offset below the queue's minimum or past its maximum. Every answer carries
``nextBeginOffset``, ``minOffset``, ``maxOffset`` and ``suggestWhichBrokerId`` (0).
"""

from __future__ import annotations

import logging
import threading

from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.errors import FilterSyntaxError, RemotingError
from broker_core.protocol.filters import MessageFilter
from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext, field_int, field_str
from broker_core.remoting_broker.msgcodec import encode_messages

log = logging.getLogger(__name__)

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

_CODES = {
    PullStatus.FOUND: ResponseCode.SUCCESS,
    PullStatus.NO_NEW_MESSAGE: ResponseCode.PULL_NOT_FOUND,
    PullStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    PullStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    PullStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
}


def pull_response(
    req: RemotingCommand, result: PullResult, store_host: tuple[str, int] | None = None
) -> RemotingCommand:
    """The 4.x answer to a pull (see the module docstring)."""
    code = _CODES[result.status]
    found = result.status is PullStatus.FOUND
    body = encode_messages(result.messages, store_host) if found else b""
    ext = {
        "nextBeginOffset": str(result.next_offset),
        "minOffset": str(result.min_offset),
        "maxOffset": str(result.max_offset),
        "suggestWhichBrokerId": "0",
    }
    return req.response(code, ext_fields=ext, body=body, remark=result.problem)


def _filter(
    ctx: RemotingContext, fields: dict[str, str], group: str, topic: str, sys_flag: int
) -> MessageFilter:
    if sys_flag & FLAG_SUBSCRIPTION and fields.get("subscription"):
        kind, expression = fields.get("expressionType") or "TAG", fields["subscription"]
    else:
        kind, expression = ctx.sessions.subscription(group, topic) or ("TAG", "*")
    return MessageFilter(kind, expression)


def handle_pull(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand | None:
    """Answer now, or return None and answer from the long-polling thread later."""
    fields = req.ext_fields
    group, topic = field_str(fields, "consumerGroup"), field_str(fields, "topic")
    queue_id, offset = field_int(fields, "queueId"), field_int(fields, "queueOffset")
    sys_flag = field_int(fields, "sysFlag", 0)
    try:
        message_filter = _filter(ctx, fields, group, topic, sys_flag)
    except FilterSyntaxError as exc:
        return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=str(exc))
    commit = field_int(fields, "commitOffset", -1)
    if sys_flag & FLAG_COMMIT_OFFSET and commit >= 0:
        ctx.broker.consumer_groups.commit_offset(group, topic, queue_id, commit)
    timeout_ms = field_int(fields, "suspendTimeoutMillis", 0) if sys_flag & FLAG_SUSPEND else 0
    max_count = max(1, field_int(fields, "maxMsgNums", 32))
    state = _Reply()

    def deliver(result: PullResult) -> None:
        answer = pull_response(req, result, ctx.host_port)
        if state.hand_back(answer):
            return  # still on the connection's thread: returned below
        try:
            channel.send(answer)
        except RemotingError as exc:
            log.info("pull answer to %r not sent: %s", channel, exc)

    request = PullRequest(topic, queue_id, offset, max_count, message_filter)
    ctx.broker.pulling.pull_async(group, request, deliver, timeout_ms=timeout_ms)
    return state.detach()


class _Reply:
    """An answer that is returned if it came before ``detach`` and sent by the caller after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answer: RemotingCommand | None = None
        self._detached = False

    def hand_back(self, answer: RemotingCommand) -> bool:
        """Keep ``answer`` for :meth:`detach`; False once detached (the caller sends it)."""
        with self._lock:
            if self._detached:
                return False
            self._answer = answer
            return True

    def detach(self) -> RemotingCommand | None:
        with self._lock:
            self._detached = True
            return self._answer
