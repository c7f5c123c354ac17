"""A consume queue: the per (topic, queue id) index of 20-byte units into the commitlog.

Files live in ``consumequeue/{topic}/{queue_id}/``, each holding ``units_per_file`` units
and named by the 20-digit byte offset of its first unit. Logical offset ``n`` is at byte
``n * 20``. One unit::

    offset size field
    0      8    commitlog_offset  int64   physical offset of the message unit
    8      4    size              int32   size of the message unit (> 0; 0 = not written)
    12     8    tag_code          int64   ``message.tag_hash`` of the tag (0 = no tag)

Crash contract: units are not checksummed. The queue is derived from the commitlog and
is truncated (``truncate_from_physical``) and re-dispatched after a crash; a queue that
fails validation is deleted and rebuilt by the store. Only the dispatch thread writes;
any thread may read below ``max_offset``.
"""

from __future__ import annotations

import logging
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from broker_core.errors import CorruptionError, OffsetOutOfRangeError
from broker_core.store.mapped_file import MappedFile, segment_name

log = logging.getLogger(__name__)

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size
assert UNIT_SIZE == 20
UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tag", ">i8")])
_FILE_RE = re.compile(r"^\d{20}$")


class ConsumeQueue:
    """Units of one queue, addressed by logical offset."""

    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.file_bytes = units_per_file * UNIT_SIZE
        self._files: list[MappedFile] = []  # copy-on-write, like the commitlog's segments
        self.min_offset = 0
        self.max_offset = 0  # next logical offset to be written
        self.dirty = False

    # ---- loading --------------------------------------------------------------------

    def load(self) -> None:
        """Map existing files; CorruptionError if they are not contiguous or sized right."""
        if not self.directory.exists():
            return
        names = sorted(p.name for p in self.directory.iterdir() if _FILE_RE.match(p.name))
        files: list[MappedFile] = []
        for name in names:
            path = self.directory / name
            if int(name) % self.file_bytes:
                raise CorruptionError(
                    "consume queue file name not on a file boundary", path=str(path), position=0
                )
            if files and int(name) != files[-1].base_offset + self.file_bytes:
                raise CorruptionError(
                    "consume queue file missing before this one", path=str(path), position=0
                )
            if path.stat().st_size != self.file_bytes:
                raise CorruptionError(
                    f"consume queue file is not {self.file_bytes} bytes", path=str(path), position=0
                )
            mf = MappedFile(path, self.file_bytes, create=False, random_access=True)
            mf.wrote_position = mf.flushed_position = self.file_bytes
            files.append(mf)
        self._files = files
        if not files:
            return
        last, first = files[-1], files[0]
        last.wrote_position = last.flushed_position = (
            self._first_unit_where(last, lambda size: size == 0) * UNIT_SIZE
        )
        self.max_offset = last.end_offset // UNIT_SIZE
        first_valid = self._first_unit_where(first, lambda size: size > 0)
        self.min_offset = min(first.base_offset // UNIT_SIZE + first_valid, self.max_offset)

    def _first_unit_where(self, mf: MappedFile, pred: Callable[[int], bool]) -> int:
        """Binary search for the first unit index in ``mf`` whose size satisfies ``pred``.

        ``pred`` must be false then true over the units below ``mf.wrote_position``.
        """
        lo, hi = 0, mf.wrote_position // UNIT_SIZE
        buf = mf.buffer
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(struct.unpack_from(">i", buf, mid * UNIT_SIZE + 8)[0]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    # ---- writing (dispatch thread only) ---------------------------------------------

    def put(self, logical_offset: int, physical_offset: int, size: int, tag_code: int) -> None:
        """Write the unit for ``logical_offset``; a unit already written is left alone."""
        if logical_offset < self.max_offset:
            return
        if self._files and logical_offset > self.max_offset:
            log.warning(
                "consume queue %s:%d: gap from %d to %d",
                self.topic,
                self.queue_id,
                self.max_offset,
                logical_offset,
            )
        if not self._files:
            self.min_offset = logical_offset
        byte_pos = logical_offset * UNIT_SIZE
        mf = self._file_for_write(byte_pos)
        local = byte_pos - mf.base_offset
        UNIT.pack_into(mf.buffer, local, physical_offset, size, tag_code)
        mf.wrote_position = local + UNIT_SIZE
        self.max_offset = logical_offset + 1
        self.dirty = True

    def put_many(self, first_offset: int, units: np.ndarray) -> None:
        """``put`` for consecutive logical offsets from ``first_offset`` (``UNIT_DTYPE`` rows).

        Units already written are left alone; the rest go in one copy per file touched.
        """
        skip = self.max_offset - first_offset
        if skip > 0:
            units, first_offset = units[skip:], first_offset + skip
        if not len(units):
            return
        if self._files and first_offset > self.max_offset:
            log.warning(
                "consume queue %s:%d: gap from %d to %d",
                self.topic,
                self.queue_id,
                self.max_offset,
                first_offset,
            )
        if not self._files:
            self.min_offset = first_offset
        raw = units.tobytes()
        done = 0
        while done < len(raw):
            byte_pos = first_offset * UNIT_SIZE + done
            mf = self._file_for_write(byte_pos)
            local = byte_pos - mf.base_offset
            step = min(len(raw) - done, self.file_bytes - local)
            mf.buffer[local : local + step] = raw[done : done + step]
            mf.wrote_position = local + step
            done += step
            self.max_offset = (byte_pos + step) // UNIT_SIZE  # kept if the next file fails
        self.dirty = True

    def _file_for_write(self, byte_pos: int) -> MappedFile:
        files = self._files
        if files and files[-1].base_offset <= byte_pos < files[-1].base_offset + self.file_bytes:
            return files[-1]
        base = byte_pos - byte_pos % self.file_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        mf = MappedFile(
            self.directory / segment_name(base), self.file_bytes, create=True, random_access=True
        )
        if files:
            files[-1].wrote_position = self.file_bytes
        self._files = [*files, mf]
        return mf

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            for mf in self._files:
                if mf.flushed_position < mf.wrote_position:
                    mf.flush()

    def truncate_from_physical(self, physical_offset: int) -> None:
        """Drop every unit whose message starts at or beyond ``physical_offset``."""
        cut = self._first_logical_at_or_after(physical_offset, self.min_offset, self.max_offset)
        if cut >= self.max_offset:
            return
        keep = [
            mf
            for mf in self._files
            if mf.base_offset < cut * UNIT_SIZE or mf.base_offset == self._files[0].base_offset
        ]
        for mf in self._files[len(keep) :]:
            mf.destroy()
        self._files = keep
        last = keep[-1]
        last.truncate_to(max(0, cut * UNIT_SIZE - last.base_offset))
        self.max_offset = cut
        self.min_offset = min(self.min_offset, cut)
        self.dirty = True

    def restarted_by(self, logical_offset: int, physical_offset: int) -> bool:
        """Whether a unit for ``logical_offset`` below this queue's end, of a message stored
        after the queue's last one, means the queue began again where the log was written:
        its topic deleted and made again on a master while this slave kept the old queue.
        A unit written again (a replay) is never of a later message."""
        if logical_offset >= self.max_offset:
            return False
        if self.max_offset == self.min_offset:  # no unit left (retention): nothing to replay
            return True
        return physical_offset > self.get_unit(self.max_offset - 1)[0]

    # ---- reading --------------------------------------------------------------------

    def _locate(self, logical_offset: int) -> tuple[MappedFile, int]:
        files = self._files
        byte_pos = logical_offset * UNIT_SIZE
        idx = (byte_pos - files[0].base_offset) // self.file_bytes if files else -1
        if not (self.min_offset <= logical_offset < self.max_offset) or not 0 <= idx < len(files):
            raise OffsetOutOfRangeError(
                f"offset out of range (min is {self.min_offset}, max is {self.max_offset}): "
                f"{self.topic}:{self.queue_id} offset {logical_offset}",
                min_offset=self.min_offset,
                max_offset=self.max_offset,
            )
        mf = files[idx]
        return mf, byte_pos - mf.base_offset

    def get_unit(self, logical_offset: int) -> tuple[int, int, int]:
        """(commitlog offset, size, tag code) of one unit."""
        mf, local = self._locate(logical_offset)
        phys, size, tag = UNIT.unpack_from(mf.buffer, local)
        if size <= 0:
            raise CorruptionError(
                f"consume queue unit {logical_offset} is empty", path=str(mf.path), position=local
            )
        return phys, size, tag

    def read_units(self, logical_offset: int, max_count: int) -> bytes:
        """Raw units from ``logical_offset``, at most ``max_count``, within one file."""
        mf, local = self._locate(logical_offset)
        count = min(max_count, self.max_offset - logical_offset, (mf.size - local) // UNIT_SIZE)
        return mf.read(local, count * UNIT_SIZE)

    def _first_logical_at_or_after(self, physical_offset: int, lo: int, hi: int) -> int:
        """First logical offset in [lo, hi) whose unit starts at ≥ ``physical_offset``."""
        while lo < hi:
            mid = (lo + hi) // 2
            if self.get_unit(mid)[0] >= physical_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def offset_for_timestamp(self, timestamp_ms: int, store_time_of: Callable[[int], int]) -> int:
        """First logical offset whose message was stored at or after ``timestamp_ms``.

        Returns ``max_offset`` when every message is older. Binary search: store times
        never decrease along a queue, because appends are serialised.
        """
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if store_time_of(self.get_unit(mid)[0]) >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def verify(self, commitlog_end: int) -> str:
        """Check every unit cheaply; returns what is wrong, or "" when the queue is sound.

        Units must be non-empty, and their commitlog ranges must increase without
        overlap and end within the commitlog. (A unit that passes but points at the
        wrong message is still caught when read: the commitlog checks the offset.)
        """
        prev_end = -1
        for mf in self._files:
            lo = max(self.min_offset * UNIT_SIZE - mf.base_offset, 0)
            hi = min(self.max_offset * UNIT_SIZE - mf.base_offset, mf.size)
            if hi <= lo:
                continue
            units = np.frombuffer(mf.read(lo, hi - lo), dtype=UNIT_DTYPE)
            phys, size = units["phys"].astype(np.int64), units["size"].astype(np.int64)
            bad = np.flatnonzero(
                (size <= 0)
                | (phys < np.concatenate(([prev_end], (phys + size)[:-1])))
                | (phys + size > commitlog_end)
            )
            if bad.size:
                logical = (mf.base_offset + lo) // UNIT_SIZE + int(bad[0])
                return f"unit {logical} in {mf.path.name} is not a valid commitlog reference"
            prev_end = int(phys[-1] + size[-1])
        return ""

    # ---- retention --------------------------------------------------------------------

    def delete_below_physical(self, min_physical: int) -> int:
        """Drop files whose every unit is below ``min_physical``; fix ``min_offset``.

        Returns the number of files deleted. The newest file is always kept.
        """
        files = self._files
        deleted = 0
        while len(files) - deleted > 1:
            mf = files[deleted]
            last_phys = UNIT.unpack_from(mf.buffer, mf.size - UNIT_SIZE)[0]
            if last_phys >= min_physical:
                break
            deleted += 1
        if deleted:
            self._files = files[deleted:]
            for mf in files[:deleted]:
                mf.destroy()
        first_logical = max(
            self.min_offset,
            self._files[0].base_offset // UNIT_SIZE if self._files else self.min_offset,
        )
        self.min_offset = self._first_logical_at_or_after(
            min_physical, first_logical, self.max_offset
        )
        return deleted

    def close(self) -> None:
        self.flush()
        for mf in self._files:
            mf.close()

    def destroy(self) -> None:
        for mf in self._files:
            mf.close()
        self._files = []
        shutil.rmtree(self.directory, ignore_errors=True)
        self.min_offset = self.max_offset = 0


class ConsumeQueueSet:
    """Every consume queue of the store, found or created by (topic, queue id).

    Only the dispatch thread creates queues; lookups from other threads see either the
    old or the new dict (copy-on-write), never a half-built one.
    """

    def __init__(self, root: Path, units_per_file: int) -> None:
        self.root = root
        self.units_per_file = units_per_file
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(
                self.root / topic / str(queue_id), topic, queue_id, self.units_per_file
            )
            self._queues = {**self._queues, (topic, queue_id): cq}
        return cq

    def all(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def load_all(self) -> dict[tuple[str, int], str]:
        """Load every queue on disk; returns the queues that failed, with why."""
        failed: dict[tuple[str, int], str] = {}
        if not self.root.exists():
            return failed
        for topic_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for qdir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
                if not qdir.name.isdigit():
                    continue
                cq = self.find_or_create(topic_dir.name, int(qdir.name))
                try:
                    cq.load()
                except CorruptionError as exc:
                    failed[(cq.topic, cq.queue_id)] = str(exc)
        return failed

    def remove(self, topic: str, queue_id: int) -> None:
        cq = self._queues.get((topic, queue_id))
        if cq is not None:
            self._queues = {k: v for k, v in self._queues.items() if k != (topic, queue_id)}
            cq.destroy()

    def flush(self) -> None:
        for cq in self.all():
            cq.flush()

    def close(self) -> None:
        for cq in self.all():
            cq.close()
