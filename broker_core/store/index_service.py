"""The index service: a directory of index files, rolled, queried and repaired as one.

:class:`IndexService` rolls to a new :class:`~broker_core.store.index_file.IndexFile`
when the current one fills, answers queries across files (newest first), and repairs the
set after a crash. File names and the manifest of sealed files are ``index_manifest``'s.

Crash contract:

* :class:`IndexService` deletes files that fail validation and notices sealed files that
  went missing through ``manifest.json`` (version, then one record per sealed file: name,
  begin/end phys, index_count; written through ``atomic_file``: CRC-checked, the previous
  copy kept as ``.bak`` and used when the manifest is corrupt; with neither usable the
  manifest is re-derived, since every file but the newest is sealed).
  It then truncates the whole index at the lowest phys offset that was lost, so the index
  is always a prefix of the commitlog and re-dispatched puts stay in phys order, and
  reports that offset as ``rebuild_from``.
* Recovery recipe for the store: ``validate_and_repair()``; then if ``rebuild_from`` is
  set, re-dispatch from it; else ``truncate_from(max_phys_offset)`` and re-dispatch from
  ``max_phys_offset`` (its message may be only partly indexed); from the commitlog's start
  when ``max_phys_offset`` is -1. Because the index is a prefix, ``max_phys_offset`` alone
  is a safe restart point even if a crash loses ``rebuild_from``; ``mark_rebuilt()``
  clears it once the store has re-dispatched.

Threads: every public method holds one lock, so a query never sees a half-done put or
truncation. The store's dispatch thread is the only writer.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from broker_core.clock import now_ms
from broker_core.errors import (
    CorruptionError,
    InvalidOffsetError,
    StoreClosedError,
    StoreError,
)
from broker_core.store.index_file import IndexFile
from broker_core.store.index_layout import (
    KEY_HASH_MIN_KEYS,
    check_dimensions,
    key_hashes,
    uniform_key_hashes,
    zlib_key_hashes,
)
from broker_core.store.index_manifest import (
    MANIFEST_NAME,
    SealedFile,
    ms_for_name,
    name_for_ms,
    read_manifest,
    write_manifest,
)
from broker_core.store.mapped_file import fsync_dir

_BATCH_MIN_KEYS = 16  # keys of fewer messages than this are put one by one


class IndexService:
    """All index files of one store: put, query, roll, truncate, retain and repair."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        slot_count: int,
        max_entries: int,
        *,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        check_dimensions(slot_count, max_entries)
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._slot_count = slot_count
        self._max_entries = max_entries
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []
        self._sealed: dict[str, SealedFile] = {}
        self._rebuild_from: int | None = None
        self._closed = False
        self._pending_report = self._load()

    # -- properties ----------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def file_names(self) -> list[str]:
        with self._lock:
            return [f.name for f in self._files]

    @property
    def sealed_names(self) -> list[str]:
        with self._lock:
            return sorted(self._sealed)

    @property
    def max_phys_offset(self) -> int:
        """Phys offset of the newest entry, -1 when the index is empty."""
        with self._lock:
            return self._max_phys_locked()

    @property
    def rebuild_from(self) -> int | None:
        """Lowest phys offset whose entries were lost and must be re-dispatched, or None."""
        with self._lock:
            return self._rebuild_from

    def mark_rebuilt(self) -> None:
        """The store re-dispatched from :attr:`rebuild_from`; forget it."""
        with self._lock:
            self._rebuild_from = None

    # -- loading and repair --------------------------------------------------------------

    def _load(self) -> list[str]:
        """Open every file, dropping bad ones; truncate at the lowest loss. Returns notes."""
        (self._dir / (MANIFEST_NAME + ".tmp")).unlink(missing_ok=True)
        self._sealed, problem = read_manifest(self._dir)
        as_read = dict(self._sealed)
        notes = [problem] if problem else []
        names = sorted(n for n in os.listdir(self._dir) if ms_for_name(n) is not None)
        lost: list[int] = []
        for name in names:
            self._open_one(name, lost, notes)
        for record in [r for r in self._sealed.values() if r.name not in names]:
            notes.append(
                f"sealed index file {record.name} is missing: its {record.index_count} "
                f"entries for phys [{record.begin_phys}, {record.end_phys}] must be rebuilt"
            )
            lost.append(record.begin_phys)
            del self._sealed[record.name]
        self._drop_inner_empty_files(notes)
        if lost:
            notes.extend(self._truncate_locked(min(lost)))
            low = min(lost)
            self._rebuild_from = low if self._rebuild_from is None else min(low, self._rebuild_from)
        self._sealed = {n: r for n, r in self._sealed.items() if self._file_named(n)}
        for index in self._files[:-1]:  # only the newest file is written: the rest are sealed
            self._sealed.setdefault(index.name, SealedFile.of(index))
        if self._sealed != as_read or problem:
            write_manifest(self._dir, self._sealed.values())
        return notes

    def _open_one(self, name: str, lost: list[int], notes: list[str]) -> None:
        path = self._dir / name
        record = self._sealed.get(name)
        try:
            index = IndexFile.open(path, self._slot_count, self._max_entries)
            if record is not None and not record.matches(index):
                index.close()
                raise CorruptionError(
                    f"header disagrees with its manifest record {record}",
                    path=str(path),
                    position=0,
                )
        except CorruptionError as exc:
            if record is not None:
                low, what = record.begin_phys, f"[{record.begin_phys}, {record.end_phys}]"
            else:  # unknown range: everything after the last good entry (inclusive)
                low = max(self._max_phys_locked(), 0)
                what = f">= {low}"
            path.unlink(missing_ok=True)
            self._sealed.pop(name, None)
            lost.append(low)
            notes.append(
                f"index file {name} failed validation ({exc}); deleted, phys {what} must be rebuilt"
            )
            return
        if index.repaired_tail:
            notes.append(f"index file {name}: rolled back one put a crash interrupted")
        self._files.append(index)

    def _drop_inner_empty_files(self, notes: list[str]) -> None:
        """Only the newest file may be empty (a crash right after creating it)."""
        for index in [f for f in self._files[:-1] if f.is_empty]:
            self._delete_file(index)
            notes.append(f"index file {index.name} was empty and not the newest; deleted")

    def _file_named(self, name: str) -> IndexFile | None:
        return next((f for f in self._files if f.name == name), None)

    def validate_and_repair(self) -> list[str]:
        """Re-open and re-check every file; return what was dropped since the last call.

        Files failing validation are deleted, missing sealed files are noticed via the
        manifest, everything at or after the lowest lost phys offset is truncated, and
        :attr:`rebuild_from` tells the store where to re-dispatch from.
        """
        with self._lock:
            self._check_open()
            for index in self._files:
                index.flush()
                index.close()
            self._files = []
            notes = self._pending_report + self._load()
            self._pending_report = []
            return notes

    # -- writing -------------------------------------------------------------------------

    def put_keys(self, keys: Iterable[str], phys_offset: int, store_timestamp_ms: int) -> int:
        """Index every distinct non-empty key of one message; return entries written."""
        with self._lock:
            self._check_open()
            return self._put_keys_locked(keys, phys_offset, store_timestamp_ms)

    def _put_keys_locked(
        self, keys: Iterable[str], phys_offset: int, store_timestamp_ms: int
    ) -> int:
        files = self._files
        if not files or files[-1].is_empty:  # the newest file checks order itself
            newest = self._max_phys_locked()
            if phys_offset < max(newest, 0):
                raise InvalidOffsetError(
                    f"index put at phys {phys_offset} is before the newest entry {newest}"
                )
        written = 0
        for key in dict.fromkeys(keys):
            if key:
                self._put_one(key, phys_offset, store_timestamp_ms)
                written += 1
        return written

    def put_batch(
        self, keys: Sequence[Sequence[str]], phys_offsets: Sequence[int], store_timestamp_ms: int
    ) -> int:
        """``put_keys`` for many messages stored at one time (phys ascending), vectorised."""
        if len(keys) < _BATCH_MIN_KEYS:  # numpy's fixed cost is more than a few puts
            with self._lock:
                self._check_open()
                return sum(
                    self._put_keys_locked(message_keys, offset, store_timestamp_ms)
                    for message_keys, offset in zip(keys, phys_offsets, strict=True)
                )
        hash_array, phys_array = _hashed(keys, phys_offsets)
        if not len(hash_array):
            return 0
        with self._lock:
            self._check_open()
            files = self._files
            if not files or files[-1].is_empty:  # the newest file checks order itself
                newest = self._max_phys_locked()
                if int(phys_array[0]) < max(newest, 0):
                    raise InvalidOffsetError(
                        f"index put at phys {int(phys_array[0])} is before the newest entry "
                        f"{newest}"
                    )
            done = 0
            while done < len(hash_array):
                if not self._files or self._files[-1].name in self._sealed:
                    self._create_file()
                rest = (hash_array[done:], phys_array[done:], store_timestamp_ms)
                taken = self._files[-1].put_many(*rest)
                if taken == 0:  # full, or its time span would overflow: start a new file
                    taken = self._roll().put_many(*rest)
                    if taken == 0:
                        raise StoreError("a fresh index file refused an entry")
                done += taken
            return done

    def _put_one(self, key: str, phys_offset: int, store_timestamp_ms: int) -> None:
        if not self._files or self._files[-1].name in self._sealed:
            self._create_file()  # a sealed newest file: crash between seal and create
        if self._files[-1].put(key, phys_offset, store_timestamp_ms):
            return
        index = self._roll()
        if not index.put(key, phys_offset, store_timestamp_ms):
            raise StoreError(f"a fresh index file {index.name} refused an entry")

    def _roll(self) -> IndexFile:
        """Seal the newest file (flush, record in the manifest) and start a new one."""
        old = self._files[-1]
        old.flush()
        self._sealed[old.name] = SealedFile.of(old)
        write_manifest(self._dir, self._sealed.values())
        return self._create_file()

    def _create_file(self) -> IndexFile:
        last = ms_for_name(self._files[-1].name) if self._files else None
        epoch_ms = self._clock_ms() if last is None else max(self._clock_ms(), last + 1)
        while True:
            try:
                index = IndexFile.create(
                    self._dir / name_for_ms(epoch_ms), self._slot_count, self._max_entries
                )
                break
            except FileExistsError:
                epoch_ms += 1
        fsync_dir(self._dir)
        self._files.append(index)
        return index

    # -- reading -------------------------------------------------------------------------

    def query(self, key: str, begin_ms: int, end_ms: int, max_results: int) -> list[int]:
        """Phys offsets for ``key`` stored in [begin_ms, end_ms], newest first, deduplicated.

        May include messages whose other keys share ``key``'s hash; confirm by reading.
        """
        found: list[int] = []
        with self._lock:
            self._check_open()
            for index in reversed(self._files):
                if len(found) >= max_results:
                    break
                if index.is_empty:
                    continue
                if index.end_timestamp_ms < begin_ms or index.begin_timestamp_ms > end_ms:
                    continue
                for phys in index.query(key, begin_ms, end_ms, max_results):
                    if phys not in found and len(found) < max_results:
                        found.append(phys)
        return found

    def _max_phys_locked(self) -> int:
        return next((f.end_phys_offset for f in reversed(self._files) if not f.is_empty), -1)

    # -- truncation and retention --------------------------------------------------------

    def truncate_from(self, phys_offset: int) -> None:
        """Recovery: drop every entry with phys >= ``phys_offset``."""
        with self._lock:
            self._check_open()
            self._truncate_locked(phys_offset)

    def _truncate_locked(self, phys_offset: int) -> list[str]:
        notes: list[str] = []
        while self._files:
            index = self._files[-1]
            if index.is_empty or index.begin_phys_offset >= phys_offset:
                notes.append(
                    f"index file {index.name} ({index.index_count} entries) dropped "
                    f"by truncation at phys {phys_offset}"
                )
                self._forget_sealed(index.name)
                self._delete_file(index)
                continue
            if index.end_phys_offset >= phys_offset:
                self._forget_sealed(index.name)
                removed = index.truncate_from(phys_offset)
                notes.append(
                    f"index file {index.name}: {removed} entries at phys >= {phys_offset} truncated"
                )
            break
        return notes

    def delete_before(self, min_phys_offset: int) -> list[str]:
        """Retention: delete whole files whose newest phys < ``min_phys_offset``.

        Never deletes the newest file. Returns the names deleted.
        """
        deleted: list[str] = []
        with self._lock:
            self._check_open()
            while len(self._files) > 1 and self._files[0].end_phys_offset < min_phys_offset:
                index = self._files[0]
                self._forget_sealed(index.name)
                self._delete_file(index)
                deleted.append(index.name)
        return deleted

    def _forget_sealed(self, name: str) -> None:
        """Drop a manifest record before its file changes, so a crash can't flag a loss."""
        if self._sealed.pop(name, None) is not None:
            write_manifest(self._dir, self._sealed.values())

    def _delete_file(self, index: IndexFile) -> None:
        index.close()
        with contextlib.suppress(FileNotFoundError):
            index.path.unlink()
        self._files.remove(index)

    # -- lifecycle -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"index service for {self._dir} is closed")

    def flush(self) -> None:
        with self._lock:
            self._check_open()
            for index in self._files:
                index.flush()

    def close(self) -> None:
        """Flush and unmap every file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            for index in self._files:
                index.flush()
                index.close()
            self._files = []
            self._closed = True

    def __enter__(self) -> IndexService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _hashed(
    keys: Sequence[Sequence[str]], phys_offsets: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(key hashes uint32, their messages' phys offsets int64): each message's distinct
    non-empty keys, in order, hashed together (``index_layout.key_hashes``). One key per
    message (just the message id, the common case) takes no Python loop per message."""
    try:
        flat = [key for (key,) in keys]
    except ValueError:  # some message has no key or several
        flat = []
    if flat:
        hashes = uniform_key_hashes(flat) if len(flat) >= KEY_HASH_MIN_KEYS else None
        if hashes is None and all(flat):
            hashes = zlib_key_hashes(flat)
        if hashes is not None:
            return hashes, np.asarray(phys_offsets, np.int64)
    flat, phys = [], []
    for message_keys, offset in zip(keys, phys_offsets, strict=True):
        unique: Iterable[str] = (
            message_keys if len(message_keys) == 1 else dict.fromkeys(message_keys)
        )
        for key in unique:
            if key:
                flat.append(key)
                phys.append(offset)
    return key_hashes(flat), np.array(phys, np.int64)
