"""Message trace data: RocketMQ's TraceDataEncoder text format, and the broker's own records.

A trace message (topic ``RMQ_SYS_TRACE_TOPIC``) carries one or more *records* in its body,
as UTF-8 text. Each record is its fields joined by CONTENT_SPLITOR (U+0001) and ended by
FIELD_SPLITOR (U+0002); the first field names the record's type. Its KEYS property is the
traced message ids (and their keys), space-separated, so the index finds every trace
message of a message id (``mqadmin queryMsgTraceById`` queries the trace topic by that key).
The broker's own trace messages are keyed by their ids' buckets instead, and hold run
records (one for many messages): ``broker_core.protocol.trace_runs``.

The four types the 4.x clients write (field order of RocketMQ's ``TraceDataEncoder``)::

    #   Pub              SubBefore        SubAfter          EndTransaction
    0   "Pub"            "SubBefore"      "SubAfter"        "EndTransaction"
    1   timestamp ms     timestamp ms     request id        timestamp ms
    2   region id        region id        msg id            region id
    3   producer group   consumer group   cost ms           producer group
    4   topic            request id       success (bool)    topic
    5   msg id           msg id           keys              msg id
    6   tags             retry times      context code      tags
    7   keys             keys             timestamp ms (*)  keys
    8   store host                                          store host
    9   body length                                         msg type (ordinal)
    10  cost ms                                             transaction id
    11  msg type (ordinal)                                  transaction state (name)
    12  offset msg id (*)                                   from transaction check (bool)
    13  success (bool) (*)
    14  client host (*)

(*) optional: older clients write Pub with 13 fields (success at 12) and SubAfter with
6 or 7; a Pub of 15+ fields carries the client host at 14. Booleans are Java's
``true``/``false``; message types: 0 Normal_Msg, 1 Trans_Msg_Half, 2 Trans_msg_Commit,
3 Delay_Msg, 4 Order_Msg; transaction states: COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW.

The broker's own records (``broker_core.broker.trace``) use the same splitters and one
layout for every type; RocketMQ's decoder skips types it does not know, so ``mqadmin``
reads a trace topic holding them::

    0 type     Stored | Delivered | Ack | Nack | Retry | DLQ | Commit | Rollback | Timer
    1 timestamp ms           5 msg id           9  queue id
    2 broker name (region)   6 host             10 queue offset (-1: none)
    3 group (or "")          7 client id        11 cost ms (-1: unknown)
    4 topic                  8 attempt (0: n/a) 12 status: free text (``pull``,
                                                   ``invisible=30000``, ``level=3``, ...)

An offset pull that returned a run of consecutive offsets is one Delivered record with no
msg id, ``offset`` the run's first and status ``pull N`` (N offsets); an append's messages
in one queue are one Stored (Retry, DLQ) record whose msg id lists their ids, status
``run``: ``broker_core.protocol.trace_runs``.

Pure functions, safe from any thread.

>>> rec = TraceRecord("Pub", 1_000, group="pg", topic="t", msg_id="ID1", cost_ms=3)
>>> text = encode([rec])
>>> text.count(CONTENT_SPLITOR), text.endswith(FIELD_SPLITOR)
(13, True)
>>> [(r.type, r.msg_id, r.cost_ms, r.success) for r in decode(text)]
[('Pub', 'ID1', 3, True)]
>>> decode(encode([TraceRecord("Ack", 5, group="g", msg_id="ID1", queue_id=2, offset=7)]))[0].offset
7
>>> broker_record("Ack", 5, "", "g", "", "ID1", "", queue_id=2, offset=7) == encode_record(
...     TraceRecord("Ack", 5, group="g", msg_id="ID1", queue_id=2, offset=7))
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from broker_core.errors import InvalidArgumentError
from broker_core.protocol.property_codec import NAME_VALUE_SEP, PROPERTY_SEP

# RocketMQ's trace splitters are the two property separators (TraceConstants).
CONTENT_SPLITOR: Final = NAME_VALUE_SEP
FIELD_SPLITOR: Final = PROPERTY_SEP
_C: Final = CONTENT_SPLITOR
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
KEY_SEPARATOR = " "

CLIENT_TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction")
BROKER_TYPES = ("Stored", "Delivered", "Ack", "Nack", "Retry", "DLQ", "Commit", "Rollback", "Timer")
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg", "Order_Msg")


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One trace record, client or broker; fields a type does not carry keep their default."""

    type: str
    time_ms: int
    region: str = ""  # region id (client) or broker name (broker records)
    group: str = ""
    topic: str = ""
    msg_id: str = ""
    tags: str = ""
    keys: str = ""
    host: str = ""  # store host (Pub, EndTransaction), where it happened (broker records)
    body_length: int = 0
    cost_ms: int = -1
    msg_type: int = 0
    offset_msg_id: str = ""
    success: bool = True
    client_host: str = ""
    request_id: str = ""
    retry_times: int = 0  # SubBefore: reconsume times so far
    context_code: int = 0
    transaction_id: str = ""
    transaction_state: str = ""
    from_check: bool = False
    client_id: str = ""
    attempt: int = 0
    queue_id: int = -1
    offset: int = -1
    status: str = ""

    def index_keys(self) -> list[str]:
        """What the trace message's KEYS gets for this record: its msg id, then its keys."""
        return [self.msg_id, *(k for k in self.keys.split(KEY_SEPARATOR) if k)]


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def _fields(r: TraceRecord) -> list[object]:
    if r.type == "Pub":
        return [
            r.type,
            r.time_ms,
            r.region,
            r.group,
            r.topic,
            r.msg_id,
            r.tags,
            r.keys,
            r.host,
            r.body_length,
            r.cost_ms,
            r.msg_type,
            r.offset_msg_id,
            _b(r.success),
            *([r.client_host] if r.client_host else []),
        ]
    if r.type == "SubBefore":
        return [r.type, r.time_ms, r.region, r.group, r.request_id, r.msg_id, r.retry_times, r.keys]
    if r.type == "SubAfter":
        return [
            r.type,
            r.request_id,
            r.msg_id,
            r.cost_ms,
            _b(r.success),
            r.keys,
            r.context_code,
            r.time_ms,
        ]
    if r.type == "EndTransaction":
        return [
            r.type,
            r.time_ms,
            r.region,
            r.group,
            r.topic,
            r.msg_id,
            r.tags,
            r.keys,
            r.host,
            r.msg_type,
            r.transaction_id,
            r.transaction_state,
            _b(r.from_check),
        ]
    if r.type in BROKER_TYPES:
        return [
            r.type,
            r.time_ms,
            r.region,
            r.group,
            r.topic,
            r.msg_id,
            r.host,
            r.client_id,
            r.attempt,
            r.queue_id,
            r.offset,
            r.cost_ms,
            r.status,
        ]
    raise InvalidArgumentError(f"unknown trace record type {r.type!r}")


def encode_record(record: TraceRecord) -> str:
    """One record as its fields, CONTENT_SPLITOR between them and FIELD_SPLITOR after."""
    fields = [str(f) for f in _fields(record)]
    bad = [f for f in fields if CONTENT_SPLITOR in f or FIELD_SPLITOR in f]
    if bad:
        raise InvalidArgumentError(f"a trace field may not hold U+0001 or U+0002: {bad[0]!r}")
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR


def broker_record(
    typ: str,
    time_ms: int,
    region: str,
    group: str,
    topic: str,
    msg_id: str,
    host: str,
    client_id: str = "",
    attempt: int = 0,
    queue_id: int = -1,
    offset: int = -1,
    cost_ms: int = -1,
    status: str = "",
) -> str:
    """A broker record encoded as :func:`encode_record` would, without building a
    :class:`TraceRecord` (the broker's hot record kinds). The caller vouches that no
    field holds a splitter: names and ids cannot (the property codec refuses them)."""
    fields = (typ, str(time_ms), region, group, topic, msg_id, host, client_id, str(attempt))
    return _C.join((*fields, str(queue_id), str(offset), str(cost_ms), status)) + FIELD_SPLITOR


def broker_rows(
    typ: str,
    time_ms: int,
    region: str,
    group: str,
    topic: str,
    host: str,
    queue_id: int,
    ids: Sequence[str],
    offsets: Sequence[int],
    costs: Sequence[int] | None = None,
    *,
    status: str = "",
) -> list[str]:
    """:func:`broker_record` of many messages of one queue that share every field but
    their id, queue offset and cost (-1 without ``costs``): one append's Stored rows, one
    pull's Delivered rows. The shared fields are formatted once."""
    c, f = CONTENT_SPLITOR, FIELD_SPLITOR
    head = c.join((typ, str(time_ms), region, group, topic, ""))
    mid = c.join(("", host, "", "0", str(queue_id), ""))
    if costs is None:
        tail = c.join(("", "-1", status)) + f
        return [f"{head}{i}{mid}{o}{tail}" for i, o in zip(ids, offsets, strict=True)]
    tail = c + status + f
    return [f"{head}{i}{mid}{o}{c}{n}{tail}" for i, o, n in zip(ids, offsets, costs, strict=True)]


def encode(records: Iterable[TraceRecord]) -> str:
    """The body text of a trace message holding ``records``."""
    return "".join(encode_record(r) for r in records)


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"trace field {name} is not an integer: {value!r}") from None


def _pub(f: list[str]) -> TraceRecord:
    n = len(f)
    return TraceRecord(
        "Pub",
        _int(f[1], "timestamp"),
        f[2],
        f[3],
        f[4],
        f[5],
        f[6],
        f[7],
        f[8],
        body_length=_int(f[9], "body length"),
        cost_ms=_int(f[10], "cost"),
        msg_type=_int(f[11], "msg type"),
        offset_msg_id=f[12] if n >= 14 else "",
        success=(f[13] if n >= 14 else f[12]) == "true",
        client_host=f[14] if n >= 15 else "",
    )


def _sub_before(f: list[str]) -> TraceRecord:
    return TraceRecord(
        "SubBefore",
        _int(f[1], "timestamp"),
        f[2],
        f[3],
        msg_id=f[5],
        keys=f[7],
        request_id=f[4],
        retry_times=_int(f[6], "retry times"),
    )


def _sub_after(f: list[str]) -> TraceRecord:
    n = len(f)
    return TraceRecord(
        "SubAfter",
        _int(f[7], "timestamp") if n >= 8 else 0,
        msg_id=f[2],
        keys=f[5],
        cost_ms=_int(f[3], "cost"),
        success=f[4] == "true",
        request_id=f[1],
        context_code=_int(f[6], "context code") if n >= 7 else 0,
    )


def _end_transaction(f: list[str]) -> TraceRecord:
    return TraceRecord(
        "EndTransaction",
        _int(f[1], "timestamp"),
        f[2],
        f[3],
        f[4],
        f[5],
        f[6],
        f[7],
        f[8],
        msg_type=_int(f[9], "msg type"),
        transaction_id=f[10],
        transaction_state=f[11],
        from_check=f[12] == "true",
    )


def _broker(f: list[str]) -> TraceRecord:
    return TraceRecord(
        f[0],
        _int(f[1], "timestamp"),
        f[2],
        f[3],
        f[4],
        f[5],
        host=f[6],
        client_id=f[7],
        attempt=_int(f[8], "attempt"),
        queue_id=_int(f[9], "queue id"),
        offset=_int(f[10], "offset"),
        cost_ms=_int(f[11], "cost"),
        status=f[12],
    )


# type -> (fewest fields, decoder)
_DECODERS = {
    "Pub": (13, _pub),
    "SubBefore": (8, _sub_before),
    "SubAfter": (6, _sub_after),
    "EndTransaction": (13, _end_transaction),
    **{t: (13, _broker) for t in BROKER_TYPES},
}


def decode(text: str) -> list[TraceRecord]:
    """The records of a trace message body; a record of an unknown type is skipped (as
    RocketMQ's decoder does), one too short or with a bad number is InvalidArgumentError."""
    out: list[TraceRecord] = []
    for chunk in text.split(FIELD_SPLITOR):
        fields = chunk.split(CONTENT_SPLITOR)
        known = _DECODERS.get(fields[0])
        if known is None:
            continue
        fewest, decoder = known
        if len(fields) < fewest:
            raise InvalidArgumentError(
                f"trace record {fields[0]} has {len(fields)} fields, needs {fewest}"
            )
        out.append(decoder(fields))
    return out
