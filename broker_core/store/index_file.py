"""Index files: find messages by business key or message id within a time range.

The index maps a key (each of a message's ``KEYS`` and its unique id) to commitlog
physical offsets. It is *derived* data: the commitlog is the truth, and anything the index
loses is rebuilt by re-dispatching messages from the commitlog.

One :class:`IndexFile` is a hash map with chaining inside one fixed-size, memory-mapped
file; ``index_service.IndexService`` owns a directory of them.

File format (all integers big-endian; one ``struct.Struct`` per record)::

    offset              size  field
    ------------------  ----  --------------------------------------------------------
    header (40 bytes)
    0                      8  begin_timestamp_ms   int64  store time of entry 1 (time base)
    8                      8  end_timestamp_ms     int64  store time of the newest entry
    16                     8  begin_phys_offset    int64  phys offset of entry 1
    24                     8  end_phys_offset      int64  phys offset of the newest entry
    32                     4  hash_slot_count_used int32  hash slots that are not empty
    36                     4  index_count          int32  entries written (0 = empty file)
    hash slots (slot_count x 4 bytes), slot s at 40 + 4*s
    40 + 4*s               4  head                 int32  newest entry number whose
                                                          key_hash % slot_count == s; 0 = none
    entries (max_entries x 20 bytes), entry n (1-based) at 40 + 4*slot_count + 20*(n-1)
    +0                     4  key_hash             uint32 CRC32 of the key (message.key_hash)
    +4                     8  phys_offset          int64  commitlog offset of the message
    +12                    4  time_diff_ms         int32  store time - begin_timestamp_ms
    +16                    4  prev_entry           int32  previous entry in this slot; 0 = none

    file size = 40 + 4*slot_count + 20*max_entries (ftruncate + posix_fallocate, then mmap)
    file name = creation time, UTC, 17 digits yyyyMMddHHmmssSSS (bumped to stay unique
                and increasing); ``manifest.json`` lists the sealed files (``index_manifest``)

Invariants: entries are numbered 1..index_count in append order; phys offsets and stored
times never decrease from one entry to the next (a store time earlier than the previous
entry's -- the wall clock stepped back -- is recorded as the previous entry's time);
``prev_entry`` of entry n is the newest earlier entry in the same slot; a slot holds the
newest entry in it; the header agrees with entry 1 and the newest entry.
:meth:`IndexFile.open` checks them all (``index_validate``); the ``struct`` records and
byte positions are in ``index_layout``.

Crash contract:

* Nothing is checksummed. The index is derived data, every query hit is confirmed by the
  store reading the (checksummed) message from the commitlog, and the structural checks
  on open (sizes, header ranges, every chain link, every slot head) catch torn or garbage
  files. A file that fails them raises :class:`CorruptionError` naming the file and byte.
* ``put`` (``put_many``) writes the entry (entries), then the slot heads, then the
  header. A process killed before the header write leaves the entries of that one put
  (maybe already linked into their slots) past ``index_count``; ``open`` rolls them back
  (``repaired_tail``). Bytes past ``index_count`` must otherwise be zero. Any other
  damage (power loss reordering mmap pages, a crash in ``truncate_from``, disk
  corruption) fails validation. Pages reach disk on ``flush``
  (fdatasync), when a file is sealed, or whenever the kernel writes them back.

Threads: :class:`IndexFile` is not thread-safe; its owner, ``index_service.IndexService``,
serialises every call with one lock, so a query never sees a half-done put or truncation.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import numpy as np

from broker_core.errors import CorruptionError, DiskFullError, InvalidOffsetError, StoreClosedError
from broker_core.message import key_hash
from broker_core.store.index_layout import (
    ENTRY,
    ENTRY_DTYPE,
    HEADER,
    INT32_MAX,
    SLOT,
    Header,
    Layout,
    check_dimensions,
    link,
)
from broker_core.store.index_validate import roll_back_torn_put, validate
from broker_core.store.mapped_file import fdatasync_path

_HEADER_SIZE, _SLOT_SIZE, _ENTRY_SIZE = HEADER.size, SLOT.size, ENTRY.size


def _reserve(fd: int, size: int, path: Path) -> None:
    """Allocate the blocks now so a full disk fails here, not as SIGBUS on an mmap write."""
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(f"no room to create index file {path}") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


class IndexFile:
    """One fixed-size index file. Build with :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, slot_count: int, max_entries: int, mm: mmap.mmap) -> None:
        self._path = path
        self._slot_count = slot_count
        self._max_entries = max_entries
        self._mm: mmap.mmap | None = mm
        self._h = Header.unpack_from(mm)
        self._layout = Layout(slot_count, max_entries)
        self._entries_at = self._layout.entries_at
        self._dirty = False
        self.repaired_tail = False  # open() rolled back a put a crash interrupted

    # -- construction --------------------------------------------------------------------

    @staticmethod
    def file_size(slot_count: int, max_entries: int) -> int:
        return Layout(slot_count, max_entries).file_size

    @classmethod
    def create(cls, path: str | os.PathLike[str], slot_count: int, max_entries: int) -> IndexFile:
        """Create a new, empty file; FileExistsError if ``path`` exists."""
        check_dimensions(slot_count, max_entries)
        p = Path(path)
        size = cls.file_size(slot_count, max_entries)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, size)
            _reserve(fd, size, p)
            mm = mmap.mmap(fd, size)
        except BaseException:
            p.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return cls(p, slot_count, max_entries, mm)

    @classmethod
    def open(cls, path: str | os.PathLike[str], slot_count: int, max_entries: int) -> IndexFile:
        """Map an existing file and validate it; CorruptionError if it is not sound."""
        check_dimensions(slot_count, max_entries)
        p = Path(path)
        size = cls.file_size(slot_count, max_entries)
        fd = os.open(p, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise CorruptionError(
                    f"index file is {actual} bytes, expected {size} "
                    f"({slot_count} slots, {max_entries} entries)",
                    path=str(p),
                    position=min(actual, size),
                )
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        index = cls(p, slot_count, max_entries, mm)
        try:
            index.repaired_tail = roll_back_torn_put(mm, index._layout, index._h)
            validate(mm, index._layout, index._h, p)
        except BaseException:
            index.close()
            raise
        return index

    # -- properties ----------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def name(self) -> str:
        return self._path.name

    @property
    def slot_count(self) -> int:
        return self._slot_count

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def begin_timestamp_ms(self) -> int:
        return self._h.begin_timestamp_ms

    @property
    def end_timestamp_ms(self) -> int:
        return self._h.end_timestamp_ms

    @property
    def begin_phys_offset(self) -> int:
        return self._h.begin_phys_offset

    @property
    def end_phys_offset(self) -> int:
        return self._h.end_phys_offset

    @property
    def hash_slot_count_used(self) -> int:
        return self._h.hash_slot_count_used

    @property
    def index_count(self) -> int:
        return self._h.index_count

    @property
    def is_empty(self) -> bool:
        return self._h.index_count == 0

    @property
    def is_full(self) -> bool:
        return self._h.index_count >= self._max_entries

    @property
    def closed(self) -> bool:
        return self._mm is None

    # -- low-level access ----------------------------------------------------------------

    def _map(self) -> mmap.mmap:
        if self._mm is None:
            raise StoreClosedError(f"index file {self._path} is closed")
        return self._mm

    def _read_slot(self, slot: int) -> int:
        return self._layout.read_slot(self._map(), slot)

    def _write_slot(self, slot: int, number: int) -> None:
        self._layout.write_slot(self._map(), slot, number)

    def _read_entry(self, number: int) -> tuple[int, int, int, int]:
        return self._layout.read_entry(self._map(), number)

    def _write_entry(self, number: int, khash: int, phys: int, diff: int, prev: int) -> None:
        self._layout.write_entry(self._map(), number, khash, phys, diff, prev)

    # -- operations ----------------------------------------------------------------------

    def put(self, key: str, phys_offset: int, store_timestamp_ms: int) -> bool:
        """Append one entry; False if the file is full or the time span would overflow.

        The hot path of dispatch: positions are computed inline, one header write.
        """
        h = self._h
        mm = self._map()
        count = h.index_count
        if phys_offset < 0 or (count and phys_offset < h.end_phys_offset):
            raise InvalidOffsetError(
                f"index put at phys {phys_offset} after {h.end_phys_offset}: out of order"
            )
        if count >= self._max_entries:
            return False
        if count == 0:
            begin = stored = store_timestamp_ms
            h.begin_timestamp_ms, h.begin_phys_offset = begin, phys_offset
        else:
            begin = h.begin_timestamp_ms
            stored = (
                store_timestamp_ms
                if store_timestamp_ms > h.end_timestamp_ms
                else h.end_timestamp_ms
            )
            if stored - begin > INT32_MAX:
                return False
        number = count + 1
        khash = key_hash(key)
        slot_pos = _HEADER_SIZE + (khash % self._slot_count) * _SLOT_SIZE
        prev = SLOT.unpack_from(mm, slot_pos)[0]
        ENTRY.pack_into(
            mm, self._entries_at + count * _ENTRY_SIZE, khash, phys_offset, stored - begin, prev
        )
        SLOT.pack_into(mm, slot_pos, number)
        h.end_timestamp_ms, h.end_phys_offset, h.index_count = stored, phys_offset, number
        if prev == 0:
            h.hash_slot_count_used += 1
        HEADER.pack_into(
            mm,
            0,
            h.begin_timestamp_ms,
            stored,
            h.begin_phys_offset,
            phys_offset,
            h.hash_slot_count_used,
            number,
        )
        self._dirty = True
        return True

    def put_many(self, hashes: np.ndarray, phys: np.ndarray, store_timestamp_ms: int) -> int:
        """Append entries for key hashes stored at one time, in order; returns how many fit.

        The same file as ``put`` called for each in turn, written in order: the entries
        (field by field, straight into the mapping), the slot heads, the header. Fewer
        than all are taken when the file fills; none when the time span would overflow.
        ``phys`` must not decrease.
        """
        h = self._h
        mm = self._map()
        count = h.index_count
        if not len(hashes):
            return 0
        first_phys = int(phys[0])
        if (
            first_phys < 0
            or (count and first_phys < h.end_phys_offset)
            or bool(np.any(phys[1:] < phys[:-1]))
        ):
            raise InvalidOffsetError(
                f"index batch put at phys {first_phys} after {h.end_phys_offset}, or out of order"
            )
        take = min(len(hashes), self._max_entries - count)
        if take <= 0:
            return 0
        if count == 0:
            begin = stored = store_timestamp_ms
        else:
            begin, stored = h.begin_timestamp_ms, max(store_timestamp_ms, h.end_timestamp_ms)
            if stored - begin > INT32_MAX:
                return 0
        numbers = np.arange(count + 1, count + take + 1, dtype=np.int64)
        slots = hashes[:take] % np.uint32(self._slot_count)
        heads = np.frombuffer(mm, ">i4", self._slot_count, HEADER.size)
        entries = np.frombuffer(mm, ENTRY_DTYPE, take, self._layout.entry_pos(count + 1))
        try:
            prev, touched, newest, fresh = link(slots, numbers, heads)
            entries["hash"], entries["phys"] = hashes[:take], phys[:take]
            entries["diff"], entries["prev"] = stored - begin, prev
            h.hash_slot_count_used += fresh
            heads[touched] = newest
        finally:
            del heads, entries  # an exported buffer would keep the mapping from closing
        if count == 0:
            h.begin_timestamp_ms, h.begin_phys_offset = begin, first_phys
        h.end_timestamp_ms, h.end_phys_offset = stored, int(phys[take - 1])
        h.index_count = count + take
        h.pack_into(mm)
        self._dirty = True
        return take

    def query(self, key: str, begin_ms: int, end_ms: int, max_results: int) -> list[int]:
        """Phys offsets, newest first, of entries with ``key``'s hash stored in the range.

        Other keys with the same hash are included; the caller confirms the real key.
        """
        h = self._h
        self._map()
        if max_results <= 0 or h.index_count == 0:
            return []
        if end_ms < h.begin_timestamp_ms or begin_ms > h.end_timestamp_ms:
            return []
        khash = key_hash(key)
        number = self._read_slot(khash % self._slot_count)
        found: list[int] = []
        while 0 < number <= h.index_count and len(found) < max_results:
            entry_hash, phys, diff, prev = self._read_entry(number)
            stored = h.begin_timestamp_ms + diff
            if stored < begin_ms:
                break  # stored times never decrease, so every older entry is older still
            if entry_hash == khash and stored <= end_ms and phys not in found:
                found.append(phys)
            if prev >= number:
                break  # a damaged link; never loop
            number = prev
        return found

    def _first_at_or_after(self, phys_offset: int) -> int:
        """The lowest entry number whose phys offset is >= ``phys_offset`` (binary search)."""
        lo, hi = 1, self._h.index_count + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._read_entry(mid)[1] >= phys_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def truncate_from(self, phys_offset: int) -> int:
        """Remove every entry with phys >= ``phys_offset``; return how many were removed."""
        h = self._h
        first = self._first_at_or_after(phys_offset)
        removed = h.index_count - first + 1
        if removed <= 0:
            return 0
        for number in range(h.index_count, first - 1, -1):
            khash, _phys, _diff, prev = self._read_entry(number)
            slot = khash % self._slot_count
            if self._read_slot(slot) == number:
                self._write_slot(slot, prev)
                if prev == 0:
                    h.hash_slot_count_used -= 1
            self._write_entry(number, 0, 0, 0, 0)
        h.index_count = first - 1
        if h.index_count == 0:
            self._h = Header()
        else:
            _khash, phys, diff, _prev = self._read_entry(h.index_count)
            h.end_phys_offset, h.end_timestamp_ms = phys, h.begin_timestamp_ms + diff
        self._h.pack_into(self._map())
        self._dirty = True
        return removed

    def flush(self) -> None:
        """fdatasync the file if anything changed since the last flush.

        Not ``mmap.flush``: CPython's msync holds the GIL for the whole disk wait and
        would stall every appender; fdatasync writes back the same dirty pages without.
        """
        if self._dirty:
            self._map()
            self._dirty = False
            fdatasync_path(self._path)

    def close(self) -> None:
        """Unmap (idempotent). Does not flush; call :meth:`flush` first for durability."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def __repr__(self) -> str:
        h = self._h
        return (
            f"IndexFile({self.name}, entries={h.index_count}/{self._max_entries}, "
            f"phys=[{h.begin_phys_offset}, {h.end_phys_offset}])"
        )
