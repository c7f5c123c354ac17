"""Raw reads: a queue's commitlog units handed out as stored, for consumers that decode in bulk.

A normal read decodes every message (a Python object per message). Bulk consumers — the
Spark source, a backlog drain — want thousands of messages at once and decode them as
columns, so the store gives them the units themselves: the consume-queue units of the
range are read as one numpy array, runs of units that sit next to each other in the
commitlog are read with one call each (units spread among other queues' are cut out of
one read of their region), and the caller gets::

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

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from broker_core.errors import CorruptionError
from broker_core.protocol.spans import gather_spans
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import UNIT_DTYPE, ConsumeQueue

# A region at most this many times the bytes wanted is read whole and the units cut out.
DENSE_FACTOR = 16
MAX_REGION_BYTES = 64 << 20


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
        raise CorruptionError(
            f"consume queue {cq.topic}:{cq.queue_id} unit {offset + bad} is empty"
        )
    return units


class _Scratch:
    """Read buffers kept for reuse: a fresh buffer of tens of MiB costs three times the read
    itself in page faults. At most ``keep`` are kept; concurrent readers beyond that get
    buffers of their own, dropped after use."""

    def __init__(self, keep: int) -> None:
        self._free: list[bytearray] = []
        self._keep = keep
        self._lock = threading.Lock()

    @contextmanager
    def view(self, size: int) -> Iterator[memoryview]:
        with self._lock:
            buf = self._free.pop() if self._free else bytearray()
        if len(buf) < size:
            buf = bytearray(size)
        try:
            yield memoryview(buf)[:size]  # not released explicitly: a traceback may hold it
        finally:
            with self._lock:
                if len(self._free) < self._keep:
                    self._free.append(buf)


_SCRATCH = _Scratch(keep=2)


def within_bytes(sizes: np.ndarray, max_bytes: int) -> int:
    """How many leading units fit in ``max_bytes`` (at least one, when there is one)."""
    if not len(sizes):
        return 0
    fit = int(np.searchsorted(np.cumsum(sizes, dtype=np.int64), max_bytes, side="right"))
    return max(1, fit)


def read_spans(commitlog: CommitLog, phys: np.ndarray, sizes: np.ndarray) -> bytes:
    """The commitlog bytes of each ``(phys[i], sizes[i])`` span, concatenated in order.

    ``phys`` ascends (a queue's units are in commitlog order). Per segment: neighbouring
    spans are read as one; spans spread thinly over a region (a queue among a few others
    written round robin) are cut out of one read of the whole region
    (:data:`DENSE_FACTOR`), which costs a memory copy instead of a read call per unit.
    """
    if not len(phys):
        return b""
    phys = phys.astype(np.int64)
    sizes = sizes.astype(np.int64)
    seg_bytes = commitlog.segment_size
    cuts = np.flatnonzero(phys[1:] // seg_bytes != phys[:-1] // seg_bytes) + 1
    bounds = [0, *cuts.tolist(), len(phys)]
    parts = [
        _read_in_segment(commitlog, phys[a:b], sizes[a:b]) for a, b in itertools.pairwise(bounds)
    ]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _regions(commitlog: CommitLog, phys: np.ndarray, sizes: np.ndarray) -> Iterator[bytes]:
    """The spans of one segment read a region of at most MAX_REGION_BYTES at a time (a
    unit larger than that alone), so a large dense read never falls back to one read
    call per unit."""
    ends = phys + sizes
    first = 0
    while first < len(phys):
        stop = int(np.searchsorted(ends, int(phys[first]) + MAX_REGION_BYTES, side="right"))
        stop = max(stop, first + 1)
        yield _read_in_segment(commitlog, phys[first:stop], sizes[first:stop])
        first = stop


def _read_in_segment(commitlog: CommitLog, phys: np.ndarray, sizes: np.ndarray) -> bytes:
    """:func:`read_spans` for spans that all lie in one segment."""
    first, end = int(phys[0]), int(phys[-1] + sizes[-1])
    seg = commitlog.segment_at(first)
    local = first - seg.base_offset
    if local + (end - first) > seg.wrote_position:
        raise CorruptionError(
            f"consume queue points past the written end of {seg.path}",
            path=str(seg.path),
            position=first,
        )
    wanted = int(sizes.sum())
    if end - first == wanted:  # one contiguous run
        return seg.read(local, wanted)
    if end - first <= DENSE_FACTOR * wanted:
        if end - first > MAX_REGION_BYTES:  # dense but large: regions of at most that size
            return b"".join(_regions(commitlog, phys, sizes))
        with _SCRATCH.view(end - first) as view:
            seg.read_into(local, view)
            return gather_spans(np.frombuffer(view, np.uint8), phys - first, sizes)
    ends = phys + sizes
    breaks = np.flatnonzero(phys[1:] != ends[:-1]) + 1
    run_starts = [0, *breaks.tolist()]
    run_ends = [*breaks.tolist(), len(phys)]
    return b"".join(
        seg.read(int(phys[a]) - seg.base_offset, int(ends[b - 1] - phys[a]))
        for a, b in zip(run_starts, run_ends, strict=True)
    )
