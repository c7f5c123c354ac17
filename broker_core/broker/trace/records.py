"""What the broker's trace hooks saw, turned into trace records (on the trace thread).

Each builder takes a :class:`TraceContext` (broker name, host, selection and a reader of
stored messages) and what one hook captured, and returns the records of the selected
messages. Builders run on the recorder's thread, never on a request path: reading a
message back to learn its id (an ack names a queue offset) happens here.

Stored, Retry and DLQ come from the store's appends: a row in a user topic is Stored, one
in ``%RETRY%{group}`` a Retry and one in ``%DLQ%{group}`` a DLQ of that group (these two
are selected by group and id, their original topic is not read); a row in
``SCHEDULE_TOPIC_XXXX`` bound for a retry topic (a 4.x consumer's send-back) is a Retry
with its delay level. Rows of the other system topics (the trace topic itself included)
are never traced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker_core.broker.pop.model import PoppedMessage
from broker_core.broker.pop.receipt import decode_handle
from broker_core.broker.pull import PullResult
from broker_core.broker.system_topics import SCHEDULE_TOPIC, is_system_topic
from broker_core.broker.trace.selection import TraceSelection
from broker_core.message import PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY, StoredMessage
from broker_core.protocol.group_topics import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    is_dlq_topic,
    is_retry_topic,
)
from broker_core.protocol.trace import TraceRecord
from broker_core.store import codec
from broker_core.store.appended import Appended

Reader = Callable[[str, int, int], StoredMessage | None]  # (topic, queue id, offset)


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


def _kind(topic: str) -> tuple[str, str] | None:
    """(record type, group) of a row stored in ``topic``; None for untraced topics."""
    if is_retry_topic(topic):
        return "Retry", topic[len(RETRY_PREFIX) :]
    if is_dlq_topic(topic):
        return "DLQ", topic[len(DLQ_PREFIX) :]
    if topic == SCHEDULE_TOPIC:
        return "Retry", ""  # only if bound for a retry topic (read on this thread)
    if is_system_topic(topic):
        return None
    return "Stored", ""


def stored(ctx: TraceContext, batch: Appended) -> list[TraceRecord]:
    """Stored / Retry / DLQ records of one append's selected rows."""
    sel = ctx.selection
    ids: list[str] | None = None
    born = batch.born_timestamp_ms
    at = batch.store_timestamp_ms
    out: list[TraceRecord] = []
    for (topic, qid), rows in batch.queues.items():
        kind = _kind(topic)
        if kind is None or (kind[0] == "Stored" and not sel.topic_wanted(topic)):
            continue
        if ids is None:
            ids = _row_ids(batch)
        for row in rows:
            offset = int(batch.queue_offset[row])
            typ, group, status = kind[0], kind[1], ""
            if topic == SCHEDULE_TOPIC:
                found = _scheduled_retry(ctx, qid, offset)
                if found is None:
                    continue
                group, status = found
            if not ids[row] or not sel.wants(ids[row], topic if typ == "Stored" else "", group):
                continue
            cost = at - int(born[row]) if born is not None else -1
            out.append(
                TraceRecord(
                    typ,
                    at,
                    ctx.broker_name,
                    group,
                    topic,
                    ids[row],
                    host=ctx.host,
                    queue_id=qid,
                    offset=offset,
                    cost_ms=cost,
                    status=status,
                )
            )
    return out


def _scheduled_retry(ctx: TraceContext, queue_id: int, offset: int) -> tuple[str, str] | None:
    """(group, "level=N") of a delayed send-back to a retry topic; None for other delays."""
    msg = ctx.read(SCHEDULE_TOPIC, queue_id, offset)
    real = msg.properties.get(PROPERTY_REAL_TOPIC, "") if msg is not None else ""
    if not is_retry_topic(real):
        return None
    return real[len(RETRY_PREFIX) :], f"level={queue_id + 1}"


def delivered(
    ctx: TraceContext,
    at: int,
    group: str,
    client_id: str,
    popped: Sequence[PoppedMessage],
    invisible_ms: int,
) -> list[TraceRecord]:
    """A Delivered record per selected POP delivery."""
    return [
        TraceRecord(
            "Delivered",
            at,
            ctx.broker_name,
            group,
            p.topic,
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


def pulled(
    ctx: TraceContext, at: int, group: str, topic: str, queue_id: int, result: PullResult
) -> list[TraceRecord]:
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
        TraceRecord(
            "Delivered",
            at,
            ctx.broker_name,
            group,
            topic,
            msg_id,
            host=ctx.host,
            attempt=attempt,
            queue_id=queue_id,
            offset=offset,
            status="pull",
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
) -> list[TraceRecord]:
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
    return [
        TraceRecord(
            typ,
            at,
            ctx.broker_name,
            group,
            topic,
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


def single(ctx: TraceContext, record: TraceRecord) -> list[TraceRecord]:
    """A record a hook built whole (transactions, timers), if its message is selected."""
    if not ctx.selection.wants(record.msg_id, record.topic, record.group):
        return []
    return [record]
