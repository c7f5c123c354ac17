"""What the broker's trace hooks saw, turned into trace records (on the trace thread).

Each builder takes a :class:`TraceContext` (broker name, host, selection and a reader of
stored messages) and what one hook captured, and returns the records of the selected
messages. Builders run on the recorder's thread, never on a request path: reading a
message back to learn its id (an ack names a queue offset) happens here.

Stored, Retry and DLQ come from the store's appends: a row in a user topic is Stored, one
in ``%RETRY%{group}`` a Retry and one in ``%DLQ%{group}`` a DLQ of that group (these two
are selected by group and id, their original topic is not read). A message held in a
system topic (delay level, timer, transaction half) is Stored with status ``held: ...``
(its real topic read back here), except a delayed send-back to a retry topic (a 4.x
consumer's), which is a Retry with its delay level. Rows of the other system topics (the
trace topic itself included) are never traced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker_core.broker.pop.model import PoppedMessage
from broker_core.broker.pop.receipt import decode_handle
from broker_core.broker.pull import PullResult
from broker_core.broker.system_topics import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    is_system_topic,
)
from broker_core.broker.trace.selection import TraceSelection
from broker_core.message import PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY, StoredMessage
from broker_core.protocol.group_topics import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    is_dlq_topic,
    is_retry_topic,
)
from broker_core.protocol.trace import TraceRecord, broker_record, encode_record
from broker_core.store import codec
from broker_core.store.appended import Appended
from broker_core.store.message_store import PutResult

Reader = Callable[[str, int, int], StoredMessage | None]  # (topic, queue id, offset)
Encoded = tuple[str, str]  # (traced message id, the record as text)


def _encoded(records: list[TraceRecord]) -> list[Encoded]:
    return [(r.msg_id, encode_record(r)) for r in records]


@dataclass(frozen=True, slots=True)
class TraceContext:
    broker_name: str
    host: str
    selection: TraceSelection
    read: Reader


def _row_ids(batch: Appended) -> list[str]:
    """Each row's message id (its first index key: UNIQ_KEY; "" for a row without keys)."""
    if len(batch.index_keys) == len(batch.size):
        return [keys[0] for keys in batch.index_keys]
    by_phys = {phys: keys[0] for keys, phys in zip(batch.index_keys, batch.index_phys, strict=True)}
    return [by_phys.get(int(p), "") for p in batch.physical_offset.tolist()]


_HELD = {SCHEDULE_TOPIC: "delay", TIMER_TOPIC: "timer", TRANS_HALF_TOPIC: "half"}


def _kind(topic: str) -> tuple[str, str] | None:
    """(record type, group) of a row stored in ``topic``; None for untraced topics."""
    if is_retry_topic(topic):
        return "Retry", topic[len(RETRY_PREFIX) :]
    if is_dlq_topic(topic):
        return "DLQ", topic[len(DLQ_PREFIX) :]
    if topic in _HELD:
        return "Stored", ""  # a held message: its real topic is read on this thread
    if is_system_topic(topic):
        return None
    return "Stored", ""


def stored(ctx: TraceContext, batch: Appended) -> list[Encoded]:
    """Stored / Retry / DLQ records of one append's selected rows.

    The busiest builder (every traced send): unsampled rows cost one CRC, the records are
    formatted straight to text (``broker_record``)."""
    sel = ctx.selection
    ids: list[str] | None = None
    at = batch.store_timestamp_ms
    offsets = batch.queue_offset.tolist()
    born = batch.born_timestamp_ms.tolist() if batch.born_timestamp_ms is not None else None
    out: list[Encoded] = []
    for (topic, qid), rows in batch.queues.items():
        kind = _kind(topic)
        if kind is None or (
            kind[0] == "Stored" and topic not in _HELD and not sel.topic_wanted(topic)
        ):
            continue
        if ids is None:
            ids = _row_ids(batch)
        for row in rows:
            msg_id = ids[row]
            if not msg_id or not sel.sampled(msg_id):
                continue
            typ, group, status = kind[0], kind[1], ""
            if topic in _HELD:
                typ, group, status, real = _held(ctx, topic, qid, offsets[row])
                if typ == "Stored" and not sel.topic_wanted(real):
                    continue
            if not sel.group_wanted(group):
                continue
            cost = at - born[row] if born is not None else -1
            text = broker_record(
                typ,
                at,
                ctx.broker_name,
                group,
                topic,
                msg_id,
                ctx.host,
                queue_id=qid,
                offset=offsets[row],
                cost_ms=cost,
                status=status,
            )
            out.append((msg_id, text))
    return out


def _held(ctx: TraceContext, topic: str, queue_id: int, offset: int) -> tuple[str, str, str, str]:
    """(type, group, status, real topic) of a message held in a system topic: a send-back
    to a retry topic is a Retry with its delay level, anything else a Stored held
    (``delay level=N``, ``timer``, ``half``)."""
    msg = ctx.read(topic, queue_id, offset)
    real = msg.properties.get(PROPERTY_REAL_TOPIC, "") if msg is not None else ""
    held = _HELD[topic]
    if held == "delay":
        held = f"delay level={queue_id + 1}"
        if is_retry_topic(real):
            return "Retry", real[len(RETRY_PREFIX) :], f"level={queue_id + 1}", real
    return "Stored", "", f"held: {held} for {real}", real


def fired(ctx: TraceContext, at: int, status: str, puts: Sequence[PutResult]) -> list[Encoded]:
    """A Timer record per selected message a timer or delay level put back when due."""
    return _encoded(
        [
            TraceRecord(
                "Timer",
                at,
                ctx.broker_name,
                topic=p.topic,
                msg_id=p.message_id,
                host=ctx.host,
                queue_id=p.queue_id,
                offset=p.queue_offset,
                status=status,
            )
            for p in puts
            if ctx.selection.wants(p.message_id, p.topic, "")
        ]
    )


def delivered(
    ctx: TraceContext,
    at: int,
    group: str,
    client_id: str,
    popped: Sequence[PoppedMessage],
    invisible_ms: int,
) -> list[Encoded]:
    """A Delivered record per selected POP delivery."""
    return _encoded(
        [
            TraceRecord(
                "Delivered",
                at,
                ctx.broker_name,
                group,
                p.message.topic,  # the queue's topic (a retry copy's is %RETRY%group)
                p.message_id,
                host=ctx.host,
                client_id=client_id,
                attempt=p.delivery_attempt,
                queue_id=p.message.queue_id,
                offset=p.message.queue_offset,
                status=f"invisible={invisible_ms}",
            )
            for p in popped
            if ctx.selection.wants(p.message_id, p.topic, group)
        ]
    )


def pulled(
    ctx: TraceContext, at: int, group: str, topic: str, queue_id: int, result: PullResult
) -> list[Encoded]:
    """A Delivered record (status ``pull``) per selected message an offset pull returned."""
    sel = ctx.selection
    if not sel.topic_wanted(topic) or not sel.group_wanted(group):
        return []
    if result.raw is not None:
        data, pos, rows = result.raw.data, 0, []
        for size in result.raw.sizes.tolist():
            req = codec.dispatch_request(data, pos)
            rows.append((req.keys[0] if req.keys else "", req.queue_offset, 0))
            pos += size
    else:
        rows = [(m.message_id, m.queue_offset, m.reconsume_times + 1) for m in result.messages]
    return [
        (
            msg_id,
            broker_record(
                "Delivered",
                at,
                ctx.broker_name,
                group,
                topic,
                msg_id,
                ctx.host,
                attempt=attempt,
                queue_id=queue_id,
                offset=offset,
                status="pull",
            ),
        )
        for msg_id, offset, attempt in rows
        if msg_id and sel.sampled(msg_id)
    ]


def settled(
    ctx: TraceContext,
    at: int,
    typ: str,
    group: str,
    client_id: str,
    topic: str,
    receipt_handle: str,
    invisible_ms: int | None,
) -> list[Encoded]:
    """An Ack or Nack of the delivery a receipt handle names (its message read back)."""
    handle = decode_handle(receipt_handle)
    if not ctx.selection.group_wanted(group) or not ctx.selection.topic_wanted(topic):
        return []
    msg = ctx.read(handle.topic, handle.queue_id, handle.queue_offset)
    if msg is None:
        return []
    msg_id = msg.properties.get(PROPERTY_UNIQ_KEY) or msg.message_id
    if not ctx.selection.sampled(msg_id):
        return []
    return _encoded(
        [
            TraceRecord(
                typ,
                at,
                ctx.broker_name,
                group,
                handle.topic,  # the queue's topic, which queue_id and offset refer to
                msg_id,
                host=ctx.host,
                client_id=client_id,
                attempt=msg.reconsume_times + 1,
                queue_id=handle.queue_id,
                offset=handle.queue_offset,
                cost_ms=at - handle.pop_time_ms,
                status="" if invisible_ms is None else f"invisible={invisible_ms}",
            )
        ]
    )


def single(ctx: TraceContext, record: TraceRecord) -> list[Encoded]:
    """A record a hook built whole (transactions, timers), if its message is selected."""
    if not ctx.selection.wants(record.msg_id, record.topic, record.group):
        return []
    return _encoded([record])
