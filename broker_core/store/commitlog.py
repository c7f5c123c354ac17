"""The commitlog: every topic's messages in one log of fixed-size segment files.

Segments live in one directory, each named by the 20-digit zero-padded global offset of
its first byte and exactly ``segment_size_bytes`` long. A unit never spans two segments:
when the next unit does not fit, the rest of the segment gets a blank marker (see
``codec``) and the unit goes to the start of a new segment.

Crash contract: each unit is checksummed (``codec``). ``recover(from_offset)`` scans
forward from a known-good unit boundary (the checkpoint), stops at the first unit that
does not verify, zeroes everything after it and deletes later segments, and reports the
bytes it dropped. Units below the recovery point are verified when read: a bad one
raises :class:`CorruptionError` naming the file and position, never skipped silently.

Threads: ``append`` and ``flush`` may be called from any thread (appends serialise
on one lock; flush on another). Reads of offsets below ``max_offset`` need no lock.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.errors import (
    CorruptionError,
    OffsetOutOfRangeError,
    ReplicationProtocolError,
    StoreError,
)
from broker_core.message import StoredMessage
from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.appended import Appended, appended
from broker_core.store.columns import ColumnBatch
from broker_core.store.mapped_file import MappedFile, segment_name
from broker_core.store.packer import assign_queue_offsets, pack_units

log = logging.getLogger(__name__)

_SEGMENT_RE = re.compile(r"^\d{20}$")
_WINDOW_BYTES = 4 << 20
_SCAN_RUN_BYTES = 4 << 20  # recovery verifies units a run of this many bytes at a time


@dataclass(slots=True)
class CommitLogRecovery:
    """What ``recover`` found and did."""

    scanned_from: int
    end_offset: int
    dropped_bytes: int = 0
    dropped_segments: list[str] = field(default_factory=list)
    problem: str = ""


AppendHook = Callable[[Appended], None]


class QueueOffsetTable:
    """The next queue offset of every (topic, queue id); owned by the commitlog's put lock."""

    def __init__(self) -> None:
        self._next: dict[tuple[str, int], int] = {}

    def take_many(self, topic: str, queue_id: int, count: int) -> int:
        """Reserve ``count`` consecutive offsets; returns the first."""
        key = (topic, queue_id)
        offset = self._next.get(key, 0)
        self._next[key] = offset + count
        return offset

    def peek(self, topic: str, queue_id: int) -> int:
        return self._next.get((topic, queue_id), 0)

    def set(self, topic: str, queue_id: int, next_offset: int) -> None:
        self._next[(topic, queue_id)] = next_offset

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self._next if k[0] == topic]:
            del self._next[key]


def _frame_run(buf: codec.Buffer, pos: int, size: int) -> tuple[list[int], str]:
    """The sizes of the message units from ``pos`` whose frames (size, magic) look whole,
    at most ``_SCAN_RUN_BYTES`` of them, and why the run stops: ``more`` (the limit),
    ``unwritten`` (zeros), ``blank`` (the segment's blank), ``bad`` (not a unit frame)
    or ``end`` (the segment's end)."""
    sizes, start = list[int](), pos
    while pos + layout.MIN_BLANK_BYTES <= size:
        total, magic = layout.SIZE_MAGIC.unpack_from(buf, pos)
        if total == 0 and magic == 0:
            return sizes, "unwritten"
        if magic == layout.BLANK_MAGIC and pos + total == size:
            return sizes, "blank"
        if magic != layout.MESSAGE_MAGIC or total < layout.MIN_UNIT_BYTES or pos + total > size:
            return sizes, "bad"
        sizes.append(total)
        pos += total
        if pos - start >= _SCAN_RUN_BYTES:
            return sizes, "more"
    return sizes, "end"


class CommitLog:
    """Ordered segments; appends at the end, reads anywhere above the minimum."""

    def __init__(self, directory: Path, segment_size_bytes: int, store_host: tuple[str, int]):
        self.directory = directory
        self.segment_size = segment_size_bytes
        # Copy-on-write: replaced whole, never mutated, so readers need no lock.
        self._segments: list[MappedFile] = []
        self._put_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._store_host = (socket.inet_aton(store_host[0]), store_host[1])
        self.queue_offsets = QueueOffsetTable()
        self.flushed_offset = 0
        # Called under the put lock after each append with its dispatch record
        # (``appended``): dispatch takes its work from here instead of re-reading.
        self.on_append: AppendHook | None = None
        directory.mkdir(parents=True, exist_ok=True)

    # ---- opening and recovery -------------------------------------------------------

    def load(self) -> None:
        """Map existing segments; a gap between segments is corruption."""
        names = sorted(p.name for p in self.directory.iterdir() if _SEGMENT_RE.match(p.name))
        for name in names:
            path = self.directory / name
            prev = self._segments[-1].base_offset if self._segments else None
            if prev is not None and int(name) != prev + self.segment_size:
                raise CorruptionError(
                    f"commitlog segment {name} does not follow {segment_name(prev)} "
                    "(a segment is missing or has the wrong size)",
                    path=str(path),
                    position=0,
                )
            if path.stat().st_size < self.segment_size:
                # A segment cut short (a crash while it was created, a damaged disk): its
                # missing end reads as zeros, which recovery treats as it treats a zeroed
                # page — the log is cut there, as for a torn tail.
                log.warning(
                    "commitlog segment %s is %d bytes short; reading the rest as empty",
                    name,
                    self.segment_size - path.stat().st_size,
                )
                os.truncate(path, self.segment_size)
            seg = MappedFile(path, self.segment_size, create=False, pread_reads=True)
            seg.wrote_position = seg.flushed_position = self.segment_size
            self._segments = [*self._segments, seg]

    def recover(self, from_offset: int) -> CommitLogRecovery:
        """Scan from ``from_offset`` (a unit boundary), truncate the torn tail."""
        if not self._segments:
            return CommitLogRecovery(from_offset, 0)
        from_offset = max(from_offset, self.min_offset)
        idx = self._segment_index(from_offset) if from_offset < self._end_of_files() else None
        if idx is None:  # checkpoint past the files we have: scan the last segment whole
            idx = len(self._segments) - 1
            from_offset = self._segments[idx].base_offset
        pos, problem = from_offset, ""
        for seg in self._segments[idx:]:
            pos, problem, at_end = self._scan_segment(seg, pos - seg.base_offset)
            if not at_end:
                break
        report = CommitLogRecovery(from_offset, pos, problem=problem)
        self._truncate(pos, report)
        self.flushed_offset = pos
        return report

    def _scan_segment(self, seg: MappedFile, pos: int) -> tuple[int, str, bool]:
        """Verify units from ``pos``; returns (end global offset, problem, reached end).

        Units are verified a run at a time by the shared vectorised verifier
        (``codec.check_units``); the run's frames (size and magic) are walked first.
        """
        buf, base, path = seg.buffer, seg.base_offset, str(seg.path)
        while True:
            sizes, stop = _frame_run(buf, pos, seg.size)
            done, problem = codec.check_units(buf, pos, sizes, base + pos, path)
            pos += sum(sizes[:done])
            if problem is not None:
                return base + pos, str(problem), False
            if stop == "more":
                continue
            if stop == "unwritten":
                return base + pos, "", False
            if stop == "bad":
                try:
                    codec.check_unit(buf, pos, base + pos, path)
                except CorruptionError as exc:
                    return base + pos, str(exc), False
                return base + pos, f"no unit frame at {base + pos}", False
            return base + seg.size, "", True  # a blank, or the segment's end

    def _truncate(self, offset: int, report: CommitLogRecovery) -> None:
        keep = [s for s in self._segments if s.base_offset <= offset]
        if keep and keep[-1].base_offset == offset and len(keep) > 1:
            keep.pop()  # an empty segment at the tail: remove, it is recreated on demand
        for seg in self._segments[len(keep) :]:
            report.dropped_segments.append(seg.path.name)
            report.dropped_bytes += seg.written_end()
            seg.destroy()
        self._segments = keep
        if keep:
            last = keep[-1]
            local = offset - last.base_offset
            report.dropped_bytes += max(0, last.written_end(local) - local)
            last.truncate_to(local)

    # ---- writing --------------------------------------------------------------------

    def append(self, batch: ColumnBatch, now_ms: int) -> int:
        """Append a batch in order; returns the log's new end offset.

        Queue offsets are taken here, under the lock, and written with the physical
        offsets and the store time into ``batch.head`` (see ``packer``). The dispatch
        record goes to ``on_append``, still under the lock, so in log order.
        """
        queue_rows = batch.queue_rows()  # outside the lock

        def pack(lo: int, hi: int, phys: int) -> bytearray | memoryview:
            if lo == 0:  # taken only once the segments exist: a refused batch leaves no gap
                assign_queue_offsets(batch, queue_rows, self.queue_offsets.take_many)
            return pack_units(batch, lo, hi, phys, now_ms, self._store_host)

        total = len(batch.units)  # the units' bytes: the sizes' sum
        with self._put_lock:
            before = self.max_offset
            seg = self._writable_segment()
            if seg.wrote_position + total + layout.MIN_BLANK_BYTES <= seg.size:  # all fit
                seg.append(pack(0, len(batch), seg.base_offset + seg.wrote_position))
                end = seg.end_offset
            else:
                end = self._fill(batch.sizes.tolist(), pack)
            if self.on_append is not None:
                self.on_append(appended(before, end, now_ms, batch, queue_rows))
            return end

    def _fill(
        self, sizes: list[int], pack: Callable[[int, int, int], bytes | bytearray | memoryview]
    ) -> int:
        """Write units of ``sizes`` after the log's end; returns the new end offset.

        ``pack(lo, hi, phys)`` gives the bytes of units ``[lo, hi)`` placed at global
        offset ``phys``: one call, and one write into the mapping, per segment touched. A
        unit that does not fit closes its segment with a blank. Caller holds the put lock.
        """
        seg = self._writable_segment()
        spare = self._make_room(seg, sizes)  # all or nothing: files first, then bytes
        ends = list(itertools.accumulate(sizes))
        lo = 0
        while lo < len(sizes):
            start = seg.wrote_position
            room = seg.size - start - layout.MIN_BLANK_BYTES
            hi = bisect.bisect_right(ends, (ends[lo - 1] if lo else 0) + room)
            if hi == lo:  # the next unit does not fit: close this segment
                seg.append(codec.blank_unit(seg.size - start))
                seg.wrote_position = seg.size  # the blank covers the rest
                seg = spare.pop(0)
                self._segments = [*self._segments, seg]
                continue
            seg.append(pack(lo, hi, seg.base_offset + start))
            lo = hi
        return seg.end_offset

    def append_raw(self, offset: int, data: bytes) -> int:
        """Write verified units (``replica.verified_prefix``) of one segment at ``offset``.

        A slave's append: ``offset`` must be the log's end (or, for an empty log, any
        segment boundary: a new slave starts at its master's first segment). Returns the
        new end offset. No queue offsets are taken: dispatch reads them from the units.
        """
        with self._put_lock:
            end = self.max_offset
            local = offset % self.segment_size
            if (offset != end and self._segments) or (not self._segments and local):
                raise ReplicationProtocolError(
                    f"replicated bytes at offset {offset} do not continue the log (ends at {end})"
                )
            if local + len(data) > self.segment_size:
                raise ReplicationProtocolError(f"{len(data)} bytes at {offset} cross a segment")
            last = self._segments[-1] if self._segments else None
            if last is None or not last.free_bytes:
                last = self._new_segment(offset - local)
            seg = last
            seg.append(data)
            return seg.end_offset

    def _make_room(self, seg: MappedFile, sizes: list[int]) -> list[MappedFile]:
        """Create (not yet register) the segments units of ``sizes`` spill into after ``seg``.

        Done before any byte is written, so a full disk refuses the whole batch
        (DiskFullError) instead of storing the part that fitted in ``seg``.
        """
        pos, bases = seg.wrote_position, list[int]()
        if pos + sum(sizes) + layout.MIN_BLANK_BYTES > seg.size:  # else nothing spills
            for size in sizes:
                if pos + size + layout.MIN_BLANK_BYTES > seg.size:
                    bases.append((bases[-1] if bases else seg.base_offset) + self.segment_size)
                    pos = 0
                pos += size
        spare: list[MappedFile] = []
        try:
            for base in bases:
                spare.append(
                    MappedFile(
                        self.directory / segment_name(base),
                        self.segment_size,
                        create=True,
                        pread_reads=True,
                    )
                )
        except BaseException:
            for made in spare:
                made.destroy()
            raise
        return spare

    def _writable_segment(self) -> MappedFile:
        if not self._segments:
            return self._new_segment(0)
        last = self._segments[-1]
        if last.free_bytes < layout.MIN_BLANK_BYTES:
            return self._new_segment(last.base_offset + last.size)
        return last

    def _new_segment(self, base: int) -> MappedFile:
        seg = MappedFile(
            self.directory / segment_name(base), self.segment_size, create=True, pread_reads=True
        )
        self._segments = [*self._segments, seg]
        return seg

    def flush(self) -> int:
        """fdatasync everything appended so far; returns the durable offset."""
        with self._flush_lock:
            segments = self._segments
            if not segments:
                return self.flushed_offset
            end = segments[-1].end_offset  # read first: appends may continue meanwhile
            for seg in segments:
                if seg.flushed_position < seg.wrote_position:
                    seg.flush()
            self.flushed_offset = max(self.flushed_offset, end)
            return self.flushed_offset

    # ---- reading --------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """Global offset just past the last unit appended."""
        segs = self._segments
        return segs[-1].end_offset if segs else 0

    @property
    def min_offset(self) -> int:
        segs = self._segments
        return segs[0].base_offset if segs else 0

    def _end_of_files(self) -> int:
        segs = self._segments
        return segs[-1].base_offset + self.segment_size if segs else 0

    def _segment_index(self, offset: int) -> int:
        segs = self._segments
        idx = (offset - segs[0].base_offset) // self.segment_size if segs else -1
        if idx < 0 or idx >= len(segs):
            raise OffsetOutOfRangeError(
                f"commitlog offset out of range (min is {self.min_offset}): {offset}",
                min_offset=self.min_offset,
                max_offset=self.max_offset,
            )
        return idx

    def segment_at(self, offset: int) -> MappedFile:
        segs = self._segments
        idx = (offset - segs[0].base_offset) // self.segment_size if segs else -1
        if idx < 0 or idx >= len(segs):
            self._segment_index(offset)  # raises the out-of-range error
        return segs[idx]

    def read_message(self, offset: int, size: int = 0, *, max_size_bytes: int = 0) -> StoredMessage:
        """Read and verify the unit at ``offset``; CorruptionError if it does not verify.
        ``max_size_bytes`` (> 0): refuse a unit said to be larger before reading it (for
        offsets a client named, which may point into the middle of a unit)."""
        seg = self.segment_at(offset)
        local = offset - seg.base_offset
        if size <= 0:
            size = struct.unpack(">i", seg.read(local, 4))[0]
            too_big = 0 < max_size_bytes < size
            if size <= 0 or too_big or local + size > seg.size:
                raise CorruptionError(f"bad unit size {size}", path=str(seg.path), position=offset)
        raw = seg.read(local, size)
        codec.check_unit(raw, 0, offset, str(seg.path))
        return codec.decode(raw, 0)

    def read_store_timestamp(self, offset: int) -> int:
        seg = self.segment_at(offset)
        raw = seg.read(offset - seg.base_offset + layout.STORE_TIME_POS, layout.STORE_TIME.size)
        return int(layout.STORE_TIME.unpack(raw)[0])

    def iter_units(
        self, start: int, end: int, *, verify: bool = False, progress: list[int] | None = None
    ) -> Iterator[tuple[bytes, int, int]]:
        """Yield ``(buffer, position, global offset)`` of each unit in ``[start, end)``.

        ``start`` and ``end`` are unit boundaries. Segments are read in windows of
        ``_WINDOW_BYTES`` (copies, so appends beyond ``end`` are never seen) and blank
        markers are skipped. ``progress[0]``, when given, always holds the offset where
        iteration would resume: after the last unit yielded or blank skipped. Anything
        but a unit or a blank raises CorruptionError; with ``verify`` every unit's
        checksums are checked as well.
        """
        offset = start
        while offset < end:
            seg = self.segment_at(offset)
            local = offset - seg.base_offset
            stop = min(end - seg.base_offset, seg.wrote_position)
            buf = seg.read(local, min(stop - local, _WINDOW_BYTES))
            pos, blank = 0, False
            while pos + layout.MIN_BLANK_BYTES <= len(buf):
                total, magic = layout.SIZE_MAGIC.unpack_from(buf, pos)
                if magic == layout.BLANK_MAGIC:
                    blank = True
                    break
                if magic == layout.MESSAGE_MAGIC and pos + total > len(buf):
                    if pos > 0:
                        break  # the rest of this unit is in the next window
                    if total > stop - local:
                        raise CorruptionError(
                            f"unit of {total} bytes runs past the written end",
                            path=str(seg.path),
                            position=offset,
                        )
                    buf = seg.read(local, total)  # one unit larger than the window
                    continue
                if verify or magic != layout.MESSAGE_MAGIC or total < layout.HEADER_SIZE:
                    codec.check_unit(buf, pos, offset + pos, str(seg.path))
                yield buf, pos, offset + pos
                pos += total
                if progress is not None:
                    progress[0] = offset + pos
            if pos == 0 and not blank:
                if local < stop:
                    raise CorruptionError("truncated unit", path=str(seg.path), position=offset)
                return  # nothing more written in this segment
            offset = seg.base_offset + seg.size if blank else offset + pos
            if progress is not None:
                progress[0] = offset

    # ---- retention ------------------------------------------------------------------

    def segments(self) -> list[MappedFile]:
        return list(self._segments)

    def delete_first_segment(self) -> MappedFile:
        """Remove the oldest segment (never the only one); returns it, destroyed."""
        with self._put_lock:
            if len(self._segments) < 2:
                raise StoreError("refusing to delete the active commitlog segment")
            seg = self._segments[0]
            self._segments = self._segments[1:]
        seg.destroy()
        return seg

    def close(self) -> None:
        self.flush()
        for seg in self._segments:
            seg.close()
