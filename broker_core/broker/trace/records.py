"""What the broker's trace hooks saw, turned into trace records (on the trace thread).

Each builder takes a :class:`TraceContext` (broker name, host, selection and a reader of
stored messages) and what one hook captured, and returns the records of the selected
messages. Builders run on the recorder's thread, never on a request path: reading a
message back to learn its id (an ack names a queue offset) happens here.

Stored, Retry and DLQ come from the store's appends (``trace.appends``): a row in a user
topic is Stored, one in ``%RETRY%{group}`` a Retry and one in ``%DLQ%{group}`` a DLQ of that
group (these two are selected by group and id, their original topic is not read); a
message held in a system topic (:data:`HELD`) is Stored with status ``held: ...``. Rows of
the other system topics (the trace topic itself included) are never traced. This module
holds what every builder shares (:class:`TraceContext`) and the other builders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
from broker_core.broker.trace.units import raw_ids, raw_span
from broker_core.message import PROPERTY_UNIQ_KEY, StoredMessage
from broker_core.protocol.group_topics import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    is_dlq_topic,
    is_retry_topic,
)
from broker_core.protocol.trace import (
    TraceRecord,
    broker_record,
    broker_rows,
    encode_record,
)
from broker_core.protocol.trace_runs import (
    PULL_STATUS,
    bucket_key,
    bucket_keys,
    pull_keys,
)
from broker_core.store.message_store import PutResult
from broker_core.store.raw_read import RawUnits

Reader = Callable[[str, int, int], StoredMessage | None]  # (topic, queue id, offset)
# (each record's index keys: its id's bucket, or a pull run's keys; the records as text)
Chunk = tuple[list[str], list[str]]


def _encoded(records: list[TraceRecord]) -> list[Chunk]:
    if not records:
        return []
    return [([bucket_key(r.msg_id) for r in records], [encode_record(r) for r in records])]


@dataclass(frozen=True, slots=True)
class TraceContext:
    broker_name: str
    host: str
    selection: TraceSelection
    read: Reader
    read_at: Callable[[int], StoredMessage | None]  # the unit at a commitlog offset
    kinds: dict[str, tuple[str, str] | None] = field(default_factory=dict)

    def kind(self, topic: str) -> tuple[str, str] | None:
        """(record type, group) of a row stored in ``topic``, None when its appends are
        not traced (an untraced topic or group, or a system topic); memoised."""
        try:
            return self.kinds[topic]
        except KeyError:
            pass
        kind = _kind(topic)
        sel = self.selection
        if kind is not None and topic not in HELD:  # held rows: by their real topic
            typ, group = kind
            wanted = sel.group_wanted(group) and (typ != "Stored" or sel.topic_wanted(topic))
            kind = kind if wanted else None
        self.kinds[topic] = kind
        return kind


HELD = {SCHEDULE_TOPIC: "delay", TIMER_TOPIC: "timer", TRANS_HALF_TOPIC: "half"}


def _kind(topic: str) -> tuple[str, str] | None:
    """(record type, group) of a row stored in ``topic``; None for untraced topics."""
    if is_retry_topic(topic):
        return "Retry", topic[len(RETRY_PREFIX) :]
    if is_dlq_topic(topic):
        return "DLQ", topic[len(DLQ_PREFIX) :]
    if topic in HELD:
        return "Stored", ""  # a held message: its real topic is read on this thread
    if is_system_topic(topic):
        return None
    return "Stored", ""


def fired(ctx: TraceContext, at: int, status: str, puts: Sequence[PutResult]) -> list[Chunk]:
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
) -> list[Chunk]:
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
) -> list[Chunk]:
    """A Delivered record (status ``pull``) per selected message an offset pull returned."""
    sel = ctx.selection
    if not sel.topic_wanted(topic) or not sel.group_wanted(group):
        return []
    if result.raw is not None:
        return _pulled_raw(ctx, at, group, topic, queue_id, result.raw)
    rows = [(m.message_id, m.queue_offset, m.reconsume_times + 1) for m in result.messages]
    rows = [r for r in rows if r[0] and sel.sampled(r[0])]
    texts = [
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
        )
        for msg_id, offset, attempt in rows
    ]
    return [(bucket_keys(r[0] for r in rows), texts)] if rows else []


def _pulled_raw(
    ctx: TraceContext, at: int, group: str, topic: str, queue_id: int, raw: RawUnits
) -> list[Chunk]:
    """A raw pull's Delivered records: one for a run of consecutive offsets (the usual
    answer; ``protocol.trace_runs.pull_key``), else one per selected message."""
    sel = ctx.selection
    count = raw.count
    if not count:
        return []
    first, last = raw_span(raw.data, raw.sizes)
    if last - first == count - 1:
        text = broker_record(
            "Delivered", at, ctx.broker_name, group, topic, "", ctx.host,
            queue_id=queue_id, offset=first, status=f"{PULL_STATUS} {count}",
        )  # fmt: skip
        return [([pull_keys(topic, queue_id, first, count)], [text])]
    ids, listed = raw_ids(raw.data, raw.sizes)
    if sel.ratio < 1 or "" in ids:
        keep = [i for i, msg_id in enumerate(ids) if msg_id and sel.sampled(msg_id)]
        ids, listed = [ids[i] for i in keep], [listed[i] for i in keep]
    if not ids:
        return []
    texts = broker_rows(
        "Delivered", at, ctx.broker_name, group, topic, ctx.host, queue_id, ids, listed,
        status=PULL_STATUS,
    )  # fmt: skip
    return [(bucket_keys(ids), texts)]


def settled(
    ctx: TraceContext,
    at: int,
    typ: str,
    group: str,
    client_id: str,
    topic: str,
    receipt_handle: str,
    invisible_ms: int | None,
) -> list[Chunk]:
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


def single(ctx: TraceContext, record: TraceRecord) -> list[Chunk]:
    """A record a hook built whole (transactions, timers), if its message is selected."""
    if not ctx.selection.wants(record.msg_id, record.topic, record.group):
        return []
    return _encoded([record])
