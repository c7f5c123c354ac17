"""One fixed-size, memory-mapped file: the building block of commitlog and consume queues.

The file is created at its full size with ``posix_fallocate`` so a full disk is reported
as :class:`DiskFullError` when the file is made, never as a SIGBUS while writing through
the mapping. Positions are file-relative; ``base_offset`` is the global offset of byte 0.

Crash contract: nothing here is checksummed; callers decide what the bytes mean. ``flush``
makes ``[flushed_position, wrote_position)`` durable (fdatasync). One writer thread at a
time; readers may read below ``wrote_position`` concurrently.
"""

from __future__ import annotations

import errno
import io
import mmap
import os
from pathlib import Path

from broker_core.errors import DiskFullError, StoreError

PAGE_SIZE = mmap.PAGESIZE
_ZERO_CHUNK = bytes(1 << 20)


class MappedFile:
    """A fixed-size file mapped into memory, appended to at ``wrote_position``."""

    def __init__(
        self,
        path: Path,
        size: int,
        *,
        create: bool,
        random_access: bool = False,
        pread_reads: bool = False,
    ) -> None:
        self.path = path
        self.size = size
        self.base_offset = int(path.name)
        if create:
            _create_file(path, size)
        elif path.stat().st_size != size:
            raise StoreError(
                f"{path} is {path.stat().st_size} bytes, expected {size}: refusing to map it"
            )
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        if random_access:  # no readahead: a first write would fault the whole file in
            self._mm.madvise(mmap.MADV_RANDOM)
        # pread_reads: serve reads from the page cache with pread instead of the mapping,
        # so what readers touch (a 10M-message backlog read at random) is not counted in
        # the broker's RSS. The descriptor closes when the last reader drops it.
        self._reader: io.FileIO | None = io.FileIO(path, "r") if pread_reads else None
        self.wrote_position = 0
        self.flushed_position = 0
        self._fd = -1  # opened by the first append, kept for appends and flushes

    @property
    def end_offset(self) -> int:
        """Global offset just past the last written byte."""
        return self.base_offset + self.wrote_position

    @property
    def free_bytes(self) -> int:
        return self.size - self.wrote_position

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the write position; returns the file-relative position.

        Appends go through ``pwrite`` on a file descriptor, not the mapping: the kernel
        copies into the page cache without a page fault per fresh page (the mapping
        shares that cache, so readers see the bytes at once), and the GIL is released
        during the copy.
        """
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.size:
            raise StoreError(f"append of {len(data)} bytes overruns {self.path}")
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR)
        written = os.pwrite(self._fd, data, pos)
        if written != len(data):
            raise StoreError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self.wrote_position = end
        return pos

    def write_at(self, pos: int, data: bytes | bytearray) -> None:
        self._mm[pos : pos + len(data)] = data

    def read(self, pos: int, size: int) -> bytes:
        """``size`` bytes from ``pos``: through the mapping, or with ``pread`` when the file
        was opened with ``pread_reads`` (see ``__init__``)."""
        reader = self._reader  # a local reference keeps the descriptor open while we read
        if reader is None:
            return self._mm[pos : pos + size]
        return os.pread(reader.fileno(), size, pos)

    def read_into(self, pos: int, out: memoryview) -> None:
        """Fill ``out`` with the bytes from ``pos`` (``read`` without a fresh buffer)."""
        reader = self._reader
        if reader is None:
            out[:] = self._mm[pos : pos + len(out)]
            return
        got = os.preadv(reader.fileno(), [out], pos)
        if got != len(out):
            raise StoreError(f"short read of {self.path}: {got} of {len(out)} bytes at {pos}")

    @property
    def buffer(self) -> mmap.mmap:
        """The mapping itself, for ``struct.unpack_from`` without copies. Do not keep views."""
        return self._mm

    def flush(self) -> int:
        """Make everything written so far durable; returns the new flushed position.

        Uses fdatasync on the file rather than ``mmap.flush``: both write back the pages
        dirtied through the mapping, but CPython's msync holds the GIL for the whole
        disk wait, while fdatasync lets appenders run meanwhile (group commit needs that).
        """
        target = self.wrote_position
        if target > self.flushed_position:
            self._fdatasync()
            self.flushed_position = target
            if target == self.size and self._fd >= 0:  # full: no more appends or syncs
                os.close(self._fd)
                self._fd = -1
        return self.flushed_position

    def _fdatasync(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)
        else:
            fdatasync_path(self.path)

    def truncate_to(self, pos: int) -> None:
        """Drop everything from ``pos`` on and zero it, so no stale bytes are rescanned.

        Every non-zero byte after ``pos`` is zeroed, not only up to the first zero page:
        after a crash, pages reach the disk in any order, so a stale but intact unit may
        sit beyond a page that never made it; left there, a later append ending just
        before it would bring it back to life.
        """
        end = self.written_end(pos)
        with open(self.path, "r+b", buffering=0) as f:
            for at in range(pos, end, len(_ZERO_CHUNK)):
                f.seek(at)
                f.write(_ZERO_CHUNK[: min(len(_ZERO_CHUNK), end - at)])
            if end > pos:
                os.fdatasync(f.fileno())
        self.wrote_position = pos
        self.flushed_position = min(self.flushed_position, pos)

    def written_end(self, start: int = 0) -> int:
        """Just past the last non-zero byte at or after ``start`` (``start`` if there is none).

        Reads with ``pread`` rather than through the mapping, so scanning the unused tail
        of a 1 GiB segment adds nothing to the process's memory, and skips holes and
        unwritten extents (``SEEK_DATA``) where the filesystem reports them.
        """
        last = start
        fd = os.open(self.path, os.O_RDONLY)
        try:
            pos = start
            while pos < self.size:
                try:
                    pos = os.lseek(fd, pos, os.SEEK_DATA)
                    hole = min(os.lseek(fd, pos, os.SEEK_HOLE), self.size)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        break  # no data after pos
                    hole = self.size  # SEEK_DATA unsupported: read everything
                while pos < hole:
                    chunk = os.pread(fd, min(len(_ZERO_CHUNK), hole - pos), pos)
                    if not chunk:
                        return last
                    if chunk != _ZERO_CHUNK[: len(chunk)]:
                        last = pos + len(chunk.rstrip(b"\x00"))
                    pos += len(chunk)
        finally:
            os.close(fd)
        return last

    def close(self) -> None:
        self._reader = None  # closed by its last user (see read)
        if not self._mm.closed:
            self._mm.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _create_file(path: Path, size: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space to create {path} ({size} bytes)") from exc
        raise StoreError(f"cannot create {path}: {exc}") from exc
    os.close(fd)
    fsync_dir(path.parent)


def fdatasync_path(path: Path) -> None:
    """fdatasync a file by path: writes back pages dirtied through any mapping of it.

    Use this, not ``mmap.flush``: CPython's msync holds the GIL for the whole disk wait,
    stalling every other thread; fdatasync releases it.
    """
    fd = os.open(path, os.O_RDWR)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def segment_name(offset: int) -> str:
    """Files are named by the 20-digit zero-padded global offset of their first byte."""
    return f"{offset:020d}"
