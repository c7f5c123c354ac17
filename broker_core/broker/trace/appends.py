"""Stored, Retry and DLQ records of the store's appends (message trace).

The store's append observer (``TraceRecorder.stored``) calls :func:`taken` on the send
path; the trace thread then builds the records with :func:`runs` (the usual append: one
run record per topic) or :func:`stored` (any other: per queue or per row). A message held
in a system topic (delay level, timer, transaction half) is Stored with status
``held: ...`` (its real topic read back on the thread), except a delayed send-back to a
retry topic (a 4.x consumer's), which is a Retry with its delay level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from broker_core.broker.trace.records import HELD, Chunk, TraceContext
from broker_core.message import PROPERTY_REAL_TOPIC
from broker_core.protocol.group_topics import RETRY_PREFIX, is_retry_topic
from broker_core.protocol.property_codec import ID_HEAD, NAME_VALUE_SEP
from broker_core.protocol.trace import KEY_SEPARATOR, broker_record, broker_rows
from broker_core.protocol.trace_runs import (
    BUCKET_MARK,
    RUN_SEPARATOR,
    IdText,
    Spans,
    bucket_key,
    bucket_keys,
    bucket_runs,
    id_runs,
    joined_buckets,
    stored_blocks,
)
from broker_core.store.appended import Appended

_FIRST = itemgetter(0)


def _row_ids(batch: Appended) -> list[str]:
    """Each row's message id (its first index key: UNIQ_KEY; "" for a row without keys)."""
    if len(batch.index_keys) == len(batch.size):
        return list(map(_FIRST, batch.index_keys))
    by_phys = {phys: keys[0] for keys, phys in zip(batch.index_keys, batch.index_phys, strict=True)}
    return [by_phys.get(int(p), "") for p in batch.physical_offset.tolist()]


Blocks = list[tuple[int, int, int, int]]  # (first row, queue id, first queue offset, rows)


@dataclass(frozen=True, slots=True)
class AppendRuns:
    """What the stored hook took of a usual append (:func:`taken`): its run records'
    makings, without the append itself."""

    store_timestamp_ms: int
    born: np.ndarray | None  # each row's born time (its cost: store time − born)
    ids: IdText
    topics: list[tuple[str, str, str, Blocks]]  # (topic, record type, group, blocks)
    spans: Spans | None  # the sampled rows' spans; None: every row's


def taken(ctx: TraceContext, batch: Appended) -> AppendRuns | Appended | None:
    """What the stored hook queues of ``batch``: None when none of its rows is traced
    (no traced topic, or a sample that holds none of its buckets); the makings of its
    run records (:func:`runs`) when it is the usual append (every row has an ASCII id, all
    of one width ≥ 3, none holding the run separator; each queue's rows consecutive, at
    consecutive offsets, a topic's rows one range; no held topic); else ``batch`` itself
    (:func:`stored`).

    Runs on the request path (under the commitlog's put lock), so it does only what must
    be done while the append is in the CPU's cache, and no more: its blocks (the queue
    offsets at their ends); its ids as one string (a bulk frame's id-only properties are
    one already, as decoded; others' id strings are joined), which the trace thread
    reads a flush later in one sweep where each string would be a cache miss by then;
    under sampling, its bucket runs and their CRCs (an append sampled out is never
    queued). The trace thread never touches (nor frees) the append's per-row objects."""
    traced = [(key, rows, kind) for key, rows in batch.queues.items() if (kind := ctx.kind(key[0]))]
    if not traced:
        return None
    ids = _ids_of(batch)
    if ids is None:
        return batch
    spans = None
    sel = ctx.selection
    if sel.ratio < 1:
        spans = [span for span in bucket_runs(ids) if sel.bucket_sampled(span[2])]
        if not spans:
            return None
    topics = _topic_blocks(batch, traced)
    if topics is None:
        return batch
    return AppendRuns(batch.store_timestamp_ms, batch.born_timestamp_ms, ids, topics, spans)


def _ids_of(batch: Appended) -> IdText | None:
    """Every row's id in one string (``IdText``) when all are ASCII, of one width ≥ 3,
    none holding the run separator; None otherwise: a bulk frame's id-only properties
    (``Appended.id_text``) as they are, other appends' ids joined."""
    count = len(batch.size)
    text = batch.id_text
    if text is not None and count:
        step, rest = divmod(len(text), count)
        width = step - len(ID_HEAD) - 1
        if rest or width < 3 or RUN_SEPARATOR in text:
            return None
        return IdText(text, count, len(ID_HEAD), step, width, NAME_VALUE_SEP)
    joined = _joined_ids(batch)
    if joined is None or not joined[0].isascii():
        return None
    return IdText(joined[0], count, 0, joined[1] + 1, joined[1], RUN_SEPARATOR)


def _topic_blocks(
    batch: Appended, traced: list[tuple[tuple[str, int], list[int], tuple[str, str]]]
) -> list[tuple[str, str, str, Blocks]] | None:
    """Each traced topic's blocks, in row order; None unless each queue's rows are
    consecutive at consecutive offsets, each topic's rows one range, and no topic held."""
    for (topic, _), rows, _ in traced:
        if topic in HELD or rows[-1] - rows[0] != len(rows) - 1:
            return None
    ends = batch.queue_offset[[r for _, rows, _ in traced for r in (rows[0], rows[-1])]].tolist()
    by_topic: dict[str, tuple[str, str, Blocks]] = {}
    for ((topic, qid), rows, (typ, group)), first, last in zip(
        traced, ends[0::2], ends[1::2], strict=True
    ):
        if last - first != len(rows) - 1:
            return None
        by_topic.setdefault(topic, (typ, group, []))[2].append((rows[0], qid, first, len(rows)))
    out = []
    for topic, (typ, group, blocks) in by_topic.items():
        blocks.sort()
        end = blocks[0][0]
        for first, _, _, count in blocks:
            if first != end:
                return None
            end += count
        out.append((topic, typ, group, blocks))
    return out


def runs(ctx: TraceContext, got: AppendRuns) -> list[Chunk]:
    """Stored / Retry / DLQ records of a usual append (:func:`taken`): one run record
    (``stored_blocks``) per topic and sampled range of rows, keyed by the buckets of its
    ids, with their shared prefix written once (``id_runs``). The busiest builder (every
    traced send)."""
    found = id_runs(got.ids)
    spans = got.spans if got.spans is not None else found.spans
    costs = _costs(got.store_timestamp_ms, got.born)
    out: list[Chunk] = []
    for topic, typ, group, blocks in got.topics:
        start, last = blocks[0], blocks[-1]
        for lo, hi in _ranges(spans, start[0], last[0] + last[3]):
            buckets = dict.fromkeys(BUCKET_MARK + b for s, e, b in spans if s < hi and e > lo)
            text = stored_blocks(
                typ, got.store_timestamp_ms, ctx.broker_name, group, topic, ctx.host,
                found.joined(lo, hi), _clipped(blocks, lo, hi), _shared(costs, lo, hi),
                found.prefix,
            )  # fmt: skip
            out.append(([KEY_SEPARATOR.join(buckets)], [text]))
    return out


def stored(ctx: TraceContext, batch: Appended) -> list[Chunk]:
    """Stored / Retry / DLQ records of the selected rows of an append that is not the
    usual one (:func:`taken`): a run record per queue where it can (:func:`_queue_run`: a
    sample that is no run of offsets or an id holding a comma cannot), a record per row
    (``broker_rows``) elsewhere; held rows one by one, their real topic read back."""
    sel = ctx.selection
    ids: list[str] | None = None
    columns: tuple[list[str], list[int], list[int]] | None = None
    chosen: set[int] | None = None  # the sampled rows (with an id), when not every row is
    keys = ""
    out: list[Chunk] = []
    for (topic, qid), rows in batch.queues.items():
        kind = ctx.kind(topic)
        if kind is None:
            continue
        if ids is None:
            ids = _row_ids(batch)
            if sel.ratio < 1 or "" in ids:
                chosen = set(sel.sampled_rows(ids))
                if not chosen:
                    return []  # the usual append under sampling: nothing more to do
        if chosen is not None:
            rows = [r for r in rows if r in chosen]
            if not rows:
                continue
        if columns is None:
            columns = _columns(batch, ids)
        if topic in HELD:
            out += _held_rows(ctx, batch, columns, topic, qid, rows)
            continue
        offsets, costs = columns[1], columns[2]
        if offsets[rows[-1]] - offsets[rows[0]] == len(rows) - 1:
            pick = itemgetter(*rows) if len(rows) > 1 else lambda c, r=rows[0]: (c[r],)
            run_ids = pick(ids)
            run = _queue_run(ctx, batch, kind, topic, (qid, offsets[rows[0]]), run_ids, pick(costs))
            if run is not None:
                if chosen is not None:  # a sample: its own ids' buckets
                    out.append(([joined_buckets(run_ids)], [run]))
                    continue
                keys = keys or joined_buckets(ids)
                out.append(([keys], [run]))
                continue
        out += _row_records(ctx, batch, columns, kind, topic, qid, rows)
    return out


def _queue_run(
    ctx: TraceContext,
    batch: Appended,
    kind: tuple[str, str],
    topic: str,
    place: tuple[int, int],
    run_ids: Sequence[str],
    costs: Sequence[int],
) -> str | None:
    """The run record (``stored_blocks``, one block) of ``run_ids``, stored in queue
    ``place[0]`` from offset ``place[1]`` on; None when an id holds the run separator
    (then a record per message)."""
    joined = RUN_SEPARATOR.join(run_ids)
    if joined.count(RUN_SEPARATOR) != len(run_ids) - 1:
        return None
    cost: int | Sequence[int] = costs[0] if costs.count(costs[0]) == len(costs) else costs
    return stored_blocks(
        kind[0], batch.store_timestamp_ms, ctx.broker_name, kind[1], topic, ctx.host,
        joined, [(place[0], place[1], len(run_ids))], cost,
    )  # fmt: skip


def _joined_ids(batch: Appended) -> tuple[str, int] | None:
    """(every row's id joined by ``RUN_SEPARATOR``, their width) when every row has an
    id, all of one width ≥ 3, none holding the separator; None otherwise. Checked in C:
    the separators stand exactly where ids of one width put them, and nowhere else."""
    keys = batch.index_keys
    count = len(batch.size)
    if len(keys) != count or not count:
        return None
    joined = RUN_SEPARATOR.join(map(_FIRST, keys))
    width = len(keys[0][0])
    if width < 3 or len(joined) != count * (width + 1) - 1:
        return None
    if joined.count(RUN_SEPARATOR) != count - 1:
        return None
    if joined[width :: width + 1] != RUN_SEPARATOR * (count - 1):
        return None
    return joined, width


def _ranges(spans: list[tuple[int, int, str]], start: int, end: int) -> list[tuple[int, int]]:
    """The row ranges of ``start`` .. ``end`` that the sampled ``spans`` cover, adjacent
    spans merged."""
    out: list[tuple[int, int]] = []
    for s, e, _ in spans:
        lo, hi = max(s, start), min(e, end)
        if lo >= hi:
            continue
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _clipped(
    blocks: list[tuple[int, int, int, int]], lo: int, hi: int
) -> list[tuple[int, int, int]]:
    """The (queue, first offset, count) of ``blocks`` (first row, queue, offset, count)
    within rows ``lo`` .. ``hi``."""
    out = []
    for first, qid, offset, count in blocks:
        a, b = max(first, lo), min(first + count, hi)
        if a < b:
            out.append((qid, offset + a - first, b - a))
    return out


def _costs(store_timestamp_ms: int, born: np.ndarray | None) -> int | list[int]:
    """Every row's cost (store time − born time): the one they share, else each's. The
    usual append's rows share one born time: checked as bytes (one memcmp)."""
    if born is None:
        return -1
    raw = born.tobytes()
    if raw == raw[: born.itemsize] * len(born):
        return store_timestamp_ms - int(born[0])
    return (store_timestamp_ms - born).tolist()


def _shared(costs: int | list[int], lo: int, hi: int) -> int | list[int]:
    if isinstance(costs, int):
        return costs
    part = costs[lo:hi]
    return part[0] if part.count(part[0]) == len(part) else part


def _row_records(
    ctx: TraceContext,
    batch: Appended,
    columns: tuple[list[str], list[int], list[int]],
    kind: tuple[str, str],
    topic: str,
    qid: int,
    rows: list[int],
) -> list[Chunk]:
    """A record per row of ``rows`` (selected rows of one queue that make no run record)."""
    ids, offsets, costs = columns
    row_ids = [ids[r] for r in rows]
    texts = broker_rows(
        kind[0], batch.store_timestamp_ms, ctx.broker_name, kind[1], topic, ctx.host, qid,
        row_ids, [offsets[r] for r in rows], [costs[r] for r in rows],
    )  # fmt: skip
    return [(bucket_keys(row_ids), texts)]


def _columns(batch: Appended, ids: list[str]) -> tuple[list[str], list[int], list[int]]:
    """Each row's (message id: ``ids``, queue offset, cost: store time − born time, else
    -1)."""
    born = batch.born_timestamp_ms
    at = batch.store_timestamp_ms
    costs = (at - born).tolist() if born is not None else [-1] * len(batch.size)
    return ids, batch.queue_offset.tolist(), costs


def _held_rows(
    ctx: TraceContext,
    batch: Appended,
    columns: tuple[list[str], list[int], list[int]],
    topic: str,
    qid: int,
    rows: list[int],
) -> list[Chunk]:
    """Records of rows held in a system topic (their real topic read back), one by one."""
    sel = ctx.selection
    ids, offsets, costs = columns
    chunk: Chunk = ([], [])
    for row in rows:
        msg_id = ids[row]
        if not msg_id or not sel.sampled(msg_id):
            continue
        typ, group, status, real = _held(ctx, topic, qid, int(batch.physical_offset[row]))
        if not sel.group_wanted(group) or (typ == "Stored" and not sel.topic_wanted(real)):
            continue
        text = broker_record(
            typ,
            batch.store_timestamp_ms,
            ctx.broker_name,
            group,
            topic,
            msg_id,
            ctx.host,
            queue_id=qid,
            offset=offsets[row],
            cost_ms=costs[row],
            status=status,
        )
        chunk[0].append(bucket_key(msg_id))
        chunk[1].append(text)
    return [chunk] if chunk[0] else []


def _held(ctx: TraceContext, topic: str, queue_id: int, phys: int) -> tuple[str, str, str, str]:
    """(type, group, status, real topic) of a message held in a system topic: a send-back
    to a retry topic is a Retry with its delay level, anything else a Stored held
    (``delay level=N``, ``timer``, ``half``)."""
    msg = ctx.read_at(phys)  # by commitlog offset: its queue may not be dispatched yet
    real = msg.properties.get(PROPERTY_REAL_TOPIC, "") if msg is not None else ""
    held = HELD[topic]
    if held == "delay":
        held = f"delay level={queue_id + 1}"
        if is_retry_topic(real):
            return "Retry", real[len(RETRY_PREFIX) :], f"level={queue_id + 1}", real
    return "Stored", "", f"held: {held} for {real}", real
