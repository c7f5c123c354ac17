"""The broker's trace records of many messages, and the index keys that find them (pure).

The broker writes its busiest records not one per message but one per run, and keys its
trace messages not by every message id but coarsely; readers
(``broker_core.protocol.trace_lookup``) expand a run back into the record of the one
message they follow:

* **Stored run** (also Retry, DLQ): one append's messages in one topic, in blocks of
  consecutive offsets of a queue each. msg id: their ids joined by ``,``; queue and
  offset: the first block's; status ``run``, then ``blocks=q:o:n,...`` when there are
  several, and ``costs=c1,c2,...`` (cost -1) unless they share one cost.
* **Pull run**: an offset pull that returned consecutive offsets. Delivered, msg id
  empty, offset the first, status ``pull N`` (N offsets).
* **Keys**: a trace message is keyed by the *buckets* of the ids its records name
  (:func:`bucket_key`), and a pull run by the *places* it covers (:func:`pull_key`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from broker_core.protocol.trace import KEY_SEPARATOR, TraceRecord, broker_record

BUCKET_MARK = "~"  # starts a bucket key (:func:`bucket_key`) and a pull key


def bucket_key(msg_id: str) -> str:
    """The trace topic's index key of the broker's own records of ``msg_id``.

    A trace message holds the records of up to a few hundred messages; keying it by every
    id would cost an index entry per record. Ids differ mostly in their last characters
    (every client's ids end in a sequence), so the broker keys a trace message by its ids'
    *buckets* (:data:`BUCKET_MARK` and the id without its last two characters): one
    append's records share a few. A reader queries the bucket and keeps the records of
    the id itself (ids that share a bucket are told apart by the record's id field).

    >>> bucket_key("01A2B3C4D5E6F7000000000001"), bucket_key("7")
    ('~01A2B3C4D5E6F70000000000', '~')
    """
    return BUCKET_MARK + msg_id[:-2]


def bucket_keys(ids: Iterable[str]) -> list[str]:
    """:func:`bucket_key` of each of ``ids``."""
    return [BUCKET_MARK + i[:-2] for i in ids]


_BUCKET_OF = itemgetter(slice(None, -2))


def joined_buckets(ids: Iterable[str]) -> str:
    """The distinct :func:`bucket_key` s of ``ids``, space-separated, in first-seen order:
    the KEYS of a trace message recording them (each id cut in C, the mark added to the
    few distinct buckets only).

    >>> joined_buckets(["AB0001", "AB0002", "AC0101", "AB0003"])
    '~AB00 ~AC01'
    """
    return KEY_SEPARATOR.join(BUCKET_MARK + b for b in dict.fromkeys(map(_BUCKET_OF, ids)))


PULL_STATUS = "pull"
PULL_BUCKET = 4096  # queue offsets per pull key (:func:`pull_key`)


def pull_key(topic: str, queue_id: int, offset: int) -> str:
    """The trace topic's index key of the pull records that may cover ``offset``.

    An offset pull that returned a run of consecutive queue offsets is recorded as *one*
    Delivered record for the run: msg id empty, ``offset`` its first, status
    ``pull N`` (it covers ``offset`` .. ``offset + N - 1``), keyed by the
    :data:`PULL_BUCKET` s of offsets it spans. A reader that knows where a message was
    stored (its Stored, Retry, Timer or Commit record) queries that place's key.

    >>> pull_key("feed", 3, 5000), pull_keys("feed", 3, 4000, 200)
    ('~feed@3@1', '~feed@3@0 ~feed@3@1')
    """
    return f"{BUCKET_MARK}{topic}@{queue_id}@{offset // PULL_BUCKET}"


def pull_keys(topic: str, queue_id: int, first: int, count: int) -> str:
    """The :func:`pull_key` s of offsets ``first`` .. ``first + count - 1``, space-separated."""
    last = (first + count - 1) // PULL_BUCKET
    head = f"{BUCKET_MARK}{topic}@{queue_id}@"
    return KEY_SEPARATOR.join(f"{head}{b}" for b in range(first // PULL_BUCKET, last + 1))


RUN_STATUS = "run"
_BLOCKS = "blocks="
_PREFIXED = "prefixed"
_COSTS = "costs="
RUN_SEPARATOR = ","
Block = tuple[int, int, int]  # (queue id, first queue offset, messages)


def stored_blocks(
    typ: str,
    time_ms: int,
    region: str,
    group: str,
    topic: str,
    host: str,
    joined_ids: str,
    blocks: Sequence[Block],
    costs: int | Sequence[int],
    prefix: str = "",
) -> str:
    """One record for the messages of one append to one topic, in ``blocks``: each a
    queue, the first queue offset and a count of the messages stored there at
    consecutive offsets; ``joined_ids`` their ids in that order, joined by
    :data:`RUN_SEPARATOR` (no id holds it), less ``prefix`` when every one starts with
    it; ``costs`` the one cost they share, or each's.

    Msg id: the ids joined, or with a prefix the prefix, then each id without it (an
    append's ids mostly differ in their last few characters: a tenth of the bytes).
    Queue and offset are the first block's; status ``run``, then ``prefixed`` with a
    prefix, ``blocks=q:o:n,...`` when there are several and ``costs=c1,c2,...`` (cost
    -1) when the costs differ. :func:`expand_run` gives one message's record back.

    >>> from broker_core.protocol.trace import decode
    >>> text = stored_blocks("Stored", 9, "b", "", "t", "h", "A1,A2,A3", [(4, 10, 2), (5, 7, 1)], 3)
    >>> [(r.queue_id, r.offset, r.cost_ms, r.status) for r in decode(text)]
    [(4, 10, 3, 'run blocks=4:10:2,5:7:1')]
    >>> [(r.msg_id, r.queue_id, r.offset) for r in (expand_run(decode(text)[0], "A3"),)]
    [('A3', 5, 7)]
    >>> [r] = decode(stored_blocks("Stored", 9, "b", "", "t", "h", "A1,A2", [(2, 40, 2)], [3, 4]))
    >>> r.status, expand_run(r, "A2").cost_ms
    ('run costs=3,4', 4)
    >>> [r] = decode(stored_blocks("Stored", 9, "b", "", "t", "h", "1,2", [(0, 4, 2)], 3, "ID0"))
    >>> r.msg_id, r.status, expand_run(r, "ID02").offset
    ('ID0,1,2', 'run prefixed', 5)
    """
    status = RUN_STATUS
    if prefix:
        joined_ids = prefix + RUN_SEPARATOR + joined_ids
        status += " " + _PREFIXED
    if len(blocks) > 1:
        status += " " + _BLOCKS + RUN_SEPARATOR.join(f"{q}:{o}:{n}" for q, o, n in blocks)
    if isinstance(costs, int):
        cost = costs
    else:
        cost, status = -1, status + " " + _COSTS + RUN_SEPARATOR.join(map(str, costs))
    queue_id, first, _ = blocks[0]
    return broker_record(
        typ, time_ms, region, group, topic, joined_ids, host,
        queue_id=queue_id, offset=first, cost_ms=cost, status=status,
    )  # fmt: skip


def expand_run(record: TraceRecord, msg_id: str) -> TraceRecord | None:
    """``msg_id``'s own record out of a :func:`stored_blocks` record that lists it; None
    when ``record`` is no run or does not list it (or is malformed)."""
    words = record.status.split(" ")
    if words[0] != RUN_STATUS or record.type not in _RUN_TYPES:
        return None
    ids = run_ids(record)
    try:
        at = ids.index(msg_id)
        parts = dict(w.split("=", 1) for w in words[1:] if w != _PREFIXED)
        costs = parts.get(_COSTS[:-1])
        cost = int(costs.split(RUN_SEPARATOR)[at]) if costs is not None else record.cost_ms
        queue_id, offset = _placed(record, parts.get(_BLOCKS[:-1]), at)
    except (ValueError, IndexError):
        return None
    return dataclasses.replace(
        record, msg_id=msg_id, queue_id=queue_id, offset=offset, cost_ms=cost, status=""
    )


def run_ids(record: TraceRecord) -> list[str]:
    """The ids a :func:`stored_blocks` record lists, in order (its shared prefix put back)."""
    ids = record.msg_id.split(RUN_SEPARATOR)
    if _PREFIXED in record.status.split(" "):
        head = ids.pop(0)
        return [head + i for i in ids]
    return ids


def _placed(record: TraceRecord, blocks: str | None, at: int) -> tuple[int, int]:
    """(queue id, queue offset) of the ``at``-th message of a run record."""
    if blocks is None:
        return record.queue_id, record.offset + at
    for block in blocks.split(RUN_SEPARATOR):
        queue_id, first, count = map(int, block.split(":"))
        if at < count:
            return queue_id, first + at
        at -= count
    raise IndexError("a run's blocks hold fewer messages than its ids")


Spans = list[tuple[int, int, str]]  # (first row, end row, bucket) of ids sharing a bucket


@dataclass(frozen=True, slots=True)
class IdRuns:
    """An append's ids as its run records write them (:func:`id_runs`)."""

    prefix: str  # the characters every id starts with
    rest: str  # each id without them (``width`` characters), joined by RUN_SEPARATOR
    width: int
    spans: Spans  # the rows of each run of consecutive ids that share a bucket

    def joined(self, lo: int, hi: int) -> str:
        """Rows ``lo`` .. ``hi``'s ids less the prefix, joined (``stored_blocks``)."""
        step = self.width + 1
        return self.rest[lo * step : hi * step - 1]


@dataclass(frozen=True, slots=True)
class IdText:
    """``count`` ASCII ids of one ``width`` ≥ 3 in one string: id ``i`` at
    ``first + i * step``, each right after a ``mark`` character that stands nowhere else
    in the text (but perhaps before the first id), none holding :data:`RUN_SEPARATOR`:
    an append's ids joined by it (mark: the separator), or a bulk frame's id-only
    properties as decoded (``UNIQ_KEY 0x01 id 0x02`` each; mark: 0x01)."""

    text: str
    count: int
    first: int
    step: int
    width: int
    mark: str


def bucket_runs(ids: IdText) -> Spans:
    """The runs of consecutive ``ids`` that share a bucket, as :func:`id_runs` finds
    them, with string operations alone (the send path's sampling: a numpy version
    measured worse end to end, its calls may hand the GIL to the other request threads).

    One client's ids end in its clock and a sequence, so an append's ids are in order
    and fall in one to a few runs: each run's end is found by a binary search that
    assumes that order, then checked in C (as many ``mark + bucket`` in the run's text
    as ids after its first: the mark stands only before ids); where the check fails,
    the ids are walked one by one.

    >>> bucket_runs(IdText("AB01,AB02,AC01,AB03", 4, 0, 5, 4, ","))
    [(0, 2, 'AB'), (2, 3, 'AC'), (3, 4, 'AB')]
    """
    text, count, first, step, cut = ids.text, ids.count, ids.first, ids.step, ids.width - 2
    out = []
    row = 0
    while row < count:
        start = first + row * step
        bucket = text[start : start + cut]
        lo, hi = row + 1, count  # the first row after ``row`` outside the bucket, if in order
        while lo < hi:
            mid = (lo + hi) // 2
            at = first + mid * step
            if text[at : at + cut] == bucket:
                lo = mid + 1
            else:
                hi = mid
        end = lo
        if text.count(ids.mark + bucket, start, first + end * step - 1) != end - row - 1:
            end = row + 1  # out of order: walk
            while end < count and text[first + end * step : first + end * step + cut] == bucket:
                end += 1
        out.append((row, end, bucket))
        row = end
    return out


def id_runs(ids: IdText) -> IdRuns:
    """The prefix ``ids`` share, the rest of each, and the runs of consecutive ids that
    share a bucket (:func:`bucket_key`: an id less its last two characters), with
    string and bytes operations alone, each one pass in C (a numpy version of the same
    steps measured worse end to end: its calls may hand the GIL to the request threads).

    The prefix: where the first and last ids part (at most ``width - 2`` characters, so
    each id keeps its bucket's last character and two more), checked (every row equals
    the first but for the rest: :func:`_rows_alike`), else none. The rest: each id less the
    prefix, cut out column by column (:func:`_columns`). One client's ids differ in their
    last few characters, so the rest is a tenth of the ids' bytes; its bucket runs
    (:func:`bucket_runs`) are one to a few.

    >>> runs = id_runs(IdText("ABC01,ABC02,ABD01,ABD02", 4, 0, 6, 5, ","))
    >>> runs.prefix, runs.rest, runs.spans
    ('AB', 'C01,C02,D01,D02', [(0, 2, 'ABC'), (2, 4, 'ABD')])
    >>> id_runs(IdText("AB01,CC00,AB03", 3, 0, 5, 4, ",")).prefix  # out of order: none
    ''
    >>> id_runs(IdText("UNIQ_KEY\x01AB01\x02UNIQ_KEY\x01AB02\x02", 2, 9, 14, 4, "\x01")).rest
    '01,02'
    """
    text, count, first, step, width = ids.text, ids.count, ids.first, ids.step, ids.width
    head = text[first : first + width]
    tail = text[first + (count - 1) * step : first + (count - 1) * step + width]
    pairs = enumerate(zip(head, tail, strict=True))
    cut = min(next((i for i, (a, b) in pairs if a != b), width), width - 2)
    data = text.encode("ascii")
    if len(data) < count * step:  # joined: no separator after the last id
        data += ids.mark.encode()
    if cut and not _rows_alike(data, first + cut, first + width, step, count):
        cut = 0
    prefix = head[:cut]
    left = width - cut
    rest = _columns(data, first + cut, step, count, left)
    if left < 3:  # every id's bucket is the prefix
        spans = [(0, count, prefix)]
    else:
        runs = bucket_runs(IdText(rest, count, 0, left + 1, left, RUN_SEPARATOR))
        spans = [(s, e, prefix + b) for s, e, b in runs]
    return IdRuns(prefix, rest, left, spans)


def _rows_alike(data: bytes, lo: int, hi: int, step: int, count: int) -> bool:
    """Whether the ``count`` rows of ``step`` bytes of ``data`` are all alike but for
    their columns ``lo`` .. ``hi``: those blanked in a copy (a strided assignment each),
    it must be the first row ``count`` times (one memcmp), all in C.

    >>> _rows_alike(b"xAB.xCD.", 1, 3, 4, 2), _rows_alike(b"xAB.yCD.", 1, 3, 4, 2)
    (True, False)
    """
    rows = bytearray(data[: count * step])
    blank = bytes(count)
    for column in range(lo, hi):
        rows[column::step] = blank
    return rows == rows[:step] * count


def _columns(data: bytes, first: int, step: int, count: int, width: int) -> str:
    """The ``width`` bytes at ``first + i * step`` for each of ``count`` rows of
    ``data`` (ASCII), joined by :data:`RUN_SEPARATOR`: each column one strided slice,
    laid into the output by a strided assignment, both in C.

    >>> _columns(b"xAB.xCD.xEF.", 1, 4, 3, 2)
    'AB,CD,EF'
    """
    out = bytearray(count * (width + 1))
    span = (count - 1) * step + 1
    for column in range(width):
        at = first + column
        out[column :: width + 1] = data[at : at + span : step]
    out[width :: width + 1] = RUN_SEPARATOR.encode() * count
    return out[:-1].decode("ascii")


_RUN_TYPES = frozenset({"Stored", "Retry", "DLQ"})


def pull_run(record: TraceRecord) -> range | None:
    """The queue offsets a pull record of a run covers (:func:`pull_key`); None for any
    other record."""
    if record.type != "Delivered" or record.msg_id or not record.status.startswith("pull "):
        return None
    try:
        return range(record.offset, record.offset + int(record.status[5:]))
    except ValueError:
        return None
