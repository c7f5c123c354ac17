"""Raw reads: a queue's commitlog units handed out as stored, for consumers that decode in bulk.

A normal read decodes every message (a Python object per message). Bulk consumers — the
Spark source, a backlog drain — want thousands of messages at once and decode them as
columns, so the store gives them the units themselves: the consume-queue units of the
range are read as one numpy array, runs of units that sit next to each other in the
commitlog are copied with one slice each, and the caller gets::

    RawUnits.data    the units back to back, exactly as in the commitlog
    RawUnits.sizes   int32 per unit (its ``total_size``), so unit i starts at sum(sizes[:i])

Like Kafka's fetch path, the store does not verify checksums here: the units carry their
CRCs and physical offsets, and the reader checks them (``broker_core.client.columnar``)
where the bytes are used, which also covers the network. A consume-queue unit with a
non-positive size is corruption of the queue and raises CorruptionError.

Stateless; any thread (segments are read by copy, so appends and retention running
meanwhile never tear a unit: a segment deleted mid-read raises OffsetOutOfRangeError).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_core.errors import CorruptionError
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import ConsumeQueue

# One consume-queue unit (see consume_queue.py): commitlog offset, size, tag code.
UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tag", ">i8")])


@dataclass(slots=True)
class RawUnits:
    """Units read from one queue: bytes back to back and the size of each."""

    data: bytes
    sizes: np.ndarray  # int32, one per unit

    @property
    def count(self) -> int:
        return len(self.sizes)

    @staticmethod
    def empty() -> RawUnits:
        return RawUnits(b"", np.zeros(0, np.int32))


def queue_units(cq: ConsumeQueue, offset: int, max_count: int) -> np.ndarray:
    """Up to ``max_count`` consume-queue units from ``offset`` (fewer at the queue's end)."""
    chunks: list[np.ndarray] = []
    got = 0
    while got < max_count and offset + got < cq.max_offset:
        raw = cq.read_units(offset + got, max_count - got)
        if not raw:
            break
        chunks.append(np.frombuffer(raw, UNIT_DTYPE))
        got += len(chunks[-1])
    if not chunks:
        return np.zeros(0, UNIT_DTYPE)
    units = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    if units.size and int(units["size"].min()) <= 0:
        bad = int(np.flatnonzero(units["size"] <= 0)[0])
        raise CorruptionError(f"consume queue {cq.topic}:{cq.queue_id} unit {offset + bad} "
                              "is empty")  # fmt: skip
    return units


def within_bytes(sizes: np.ndarray, max_bytes: int) -> int:
    """How many leading units fit in ``max_bytes`` (at least one, when there is one)."""
    if not len(sizes):
        return 0
    fit = int(np.searchsorted(np.cumsum(sizes, dtype=np.int64), max_bytes, side="right"))
    return max(1, fit)


def read_spans(commitlog: CommitLog, phys: np.ndarray, sizes: np.ndarray) -> bytes:
    """The commitlog bytes of each ``(phys[i], sizes[i])`` span, concatenated in order.

    Neighbouring spans in the same segment are copied as one slice: a queue written in
    bursts, or the only queue of a topic, costs a handful of copies per read.
    """
    if not len(phys):
        return b""
    phys = phys.astype(np.int64)
    ends = phys + sizes
    seg_bytes = commitlog.segment_size
    breaks = (phys[1:] != ends[:-1]) | (phys[1:] // seg_bytes != phys[:-1] // seg_bytes)
    run_starts = np.concatenate(([0], np.flatnonzero(breaks) + 1))
    run_ends = np.concatenate((run_starts[1:], [len(phys)]))
    parts = []
    for first, last in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
        start = int(phys[first])
        seg = commitlog.segment_at(start)
        local = start - seg.base_offset
        length = int(ends[last - 1]) - start
        if local + length > seg.wrote_position:
            raise CorruptionError(f"consume queue points past the written end of {seg.path}",
                                  path=str(seg.path), position=start)  # fmt: skip
        parts.append(seg.read(local, length))
    return parts[0] if len(parts) == 1 else b"".join(parts)
