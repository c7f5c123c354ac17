"""The timer log: an append-only file of fixed-size records, one per timer event.

Each record says "the TIMER_TOPIC message at this commitlog offset is due at this time"
(a *schedule* record) or "the timer at this commitlog offset is recalled" (a *cancel*
record), and links to the previous record that went into the same timing-wheel slot,
so every slot's records form a chain walked backwards from the slot's last record
(see ``wheel.py``). Records are never rewritten; a timer that is rolled forward gets a
new record.

Record layout (big-endian, :data:`RECORD`, 36 bytes)::

    offset  size  field         type     meaning
     0      8     deliver_ms    int64    when the timer is due (ms since the epoch)
     8      8     phys_offset   int64    commitlog offset of the TIMER_TOPIC message
    16      4     size          int32    its stored size in bytes
    20      4     flags         int32    0 = schedule, 1 = cancel
    24      8     prev_pos      int64    position of the previous record of the same slot
                                         chain, -1 = first of its chain
    32      4     crc32         uint32   CRC32 of bytes 0..31

A record's position is its byte offset in the file (a multiple of 36).

Crash contract: ``append`` writes into the page cache; ``flush`` fsyncs. The wheel is
updated only after ``flush`` returned, so no wheel slot points at bytes that a crash can
take away. Opening truncates a torn tail: a partial record, then any trailing records
whose CRC fails (written, never fsynced, never linked). A record read later that fails
its CRC, or a position beyond the end, raises CorruptionError — never a silent skip.

Growth: the file only grows (retention of fully fired records is not implemented).

Threads: not thread-safe; ``TimerService`` serialises every call under its lock.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_core.broker.timer.crc_record import CrcRecord
from broker_core.errors import CorruptionError

RECORD = CrcRecord(
    "q"  # deliver_ms
    "q"  # phys_offset
    "i"  # size
    "i"  # flags
    "q"  # prev_pos
)  # then the crc32 of the 32 bytes before it (``crc_record``)
RECORD_BYTES = RECORD.size
FLAG_SCHEDULE = 0
FLAG_CANCEL = 1
NO_PREV = -1


@dataclass(frozen=True, slots=True)
class TimerRecord:
    """One decoded record (``crc32`` is checked on decode and computed on encode)."""

    deliver_ms: int
    phys_offset: int
    size: int
    flags: int = FLAG_SCHEDULE
    prev_pos: int = NO_PREV

    @property
    def cancelled(self) -> bool:
        return self.flags == FLAG_CANCEL


def encode_record(rec: TimerRecord) -> bytes:
    """The 36 bytes of ``rec``; ValueError for a flag other than schedule/cancel."""
    if rec.flags not in (FLAG_SCHEDULE, FLAG_CANCEL):
        raise ValueError(f"timer record flag must be 0 or 1, got {rec.flags}")
    return RECORD.pack(rec.deliver_ms, rec.phys_offset, rec.size, rec.flags, rec.prev_pos)


def decode_record(raw: bytes, *, path: str = "", position: int = -1) -> TimerRecord:
    """Decode and verify 36 bytes; CorruptionError when the CRC or flag is wrong."""
    what = "timer record"
    deliver_ms, phys, size, flags, prev = RECORD.unpack(
        raw, what=what, path=path, position=position
    )
    if flags not in (FLAG_SCHEDULE, FLAG_CANCEL):  # a flag no writer sets: damaged as well
        raise CorruptionError(f"{what} fails its checksum", path=path, position=position)
    return TimerRecord(deliver_ms, phys, size, flags, prev)


class TimerLog:
    """The append-only record file; see the module docstring for bytes and crash contract."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.dropped_bytes = self._recover()
        self._synced = True

    def _recover(self) -> int:
        """Truncate a torn tail; returns the bytes dropped."""
        size = os.fstat(self._fd).st_size
        end = size - size % RECORD_BYTES
        while end > 0:
            raw = os.pread(self._fd, RECORD_BYTES, end - RECORD_BYTES)
            try:
                decode_record(raw)
                break
            except CorruptionError:
                end -= RECORD_BYTES
        if end != size:
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        self._end = end
        return size - end

    @property
    def end(self) -> int:
        """The position the next appended record gets."""
        return self._end

    def append(self, rec: TimerRecord) -> int:
        """Write ``rec`` at the end (not yet durable); returns its position."""
        return self.append_many([rec])[0]

    def append_many(self, records: Sequence[TimerRecord]) -> list[int]:
        """Write ``records`` contiguously at the end (one write); returns their positions."""
        if not records:
            return []
        start = self._end
        data = b"".join(encode_record(r) for r in records)
        written = os.pwrite(self._fd, data, start)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self._end = start + len(data)
        self._synced = False
        return [start + i * RECORD_BYTES for i in range(len(records))]

    def read(self, position: int) -> TimerRecord:
        """The record at ``position``, verified; CorruptionError if absent or damaged."""
        if position < 0 or position % RECORD_BYTES or position + RECORD_BYTES > self._end:
            raise CorruptionError(
                f"timer record position {position} is outside the log (end {self._end})",
                path=str(self.path),
                position=position,
            )
        raw = os.pread(self._fd, RECORD_BYTES, position)
        return decode_record(raw, path=str(self.path), position=position)

    def flush(self) -> None:
        """Make every appended record durable."""
        if not self._synced:
            os.fsync(self._fd)
            self._synced = True

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1
