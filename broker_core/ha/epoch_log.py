"""A broker's own epoch record and the offline cut of its commitlog (controller mode).

The epoch file (``store_dir/epoch.json``, written atomically with a ``.bak`` copy and a
CRC32 of its entries) holds ``entries``: ``[epoch, start offset]`` pairs, one per master
epoch whose bytes this store holds, oldest first. The group's whole history is in etcd
(``controller``); a broker that joins a newer epoch cuts its log at the start of the
first epoch it does not know (``cut_at``) before the store opens: bytes past that point
were written by a master whose later writes were never acknowledged by the group.

``truncate_commitlog`` does the cut on the files while nothing has them open: later
segments are removed, the rest of the cut segment is zeroed, and the checkpoint is
dropped with the store marked as not cleanly shut down, so recovery rescans the log
and rebuilds the queues and the index from what is left.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from broker_core.errors import CorruptionError
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic

EPOCH_FILE = "epoch.json"
_CHUNK = 1 << 20


def _crc(entries: list[list[int]]) -> int:
    return zlib.crc32(json.dumps(entries, separators=(",", ":")).encode())


def load_entries(store_dir: Path) -> list[list[int]]:
    """The store's ``[epoch, start]`` entries ([] for a store that never had one)."""
    doc = read_json_atomic(store_dir / EPOCH_FILE).data
    if not isinstance(doc, dict):
        return []
    entries = doc.get("entries", [])
    if doc.get("crc") != _crc(entries):
        raise CorruptionError(
            "epoch file does not match its CRC", path=str(store_dir / EPOCH_FILE), position=0
        )
    return [list(map(int, e)) for e in entries]


def save_entries(store_dir: Path, entries: list[list[int]]) -> None:
    store_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(store_dir / EPOCH_FILE, {"entries": entries, "crc": _crc(entries)})


def last_epoch(store_dir: Path) -> int:
    entries = load_entries(store_dir)
    return entries[-1][0] if entries else 0


def cut_at(history: list[list[int]], my_epoch: int) -> int | None:
    """Where a store whose newest epoch is ``my_epoch`` must be cut to follow the group
    whose epoch history is ``history``: the start of the first later epoch (None: no cut)."""
    later = [start for epoch, start in history if epoch > my_epoch]
    return min(later) if later else None


def commitlog_end(store_dir: Path) -> int:
    """The end of the written units, following total-size fields from the first segment
    (a blank runs to its segment's end); 0 for an empty store."""
    end = 0
    for path in _segments(store_dir):
        base, data = int(path.name), path.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size = int.from_bytes(data[pos : pos + 4], "big")
            if size == 0:
                return base + pos
            pos += size
        end = base + len(data)
    return end


def truncate_commitlog(store_dir: Path, offset: int) -> int:
    """Cut the closed store's commitlog at ``offset`` (a unit boundary); returns the
    number of bytes that were written past it and are now gone (0: nothing touched)."""
    end = commitlog_end(store_dir)
    if end <= offset:
        return 0
    for path in _segments(store_dir):
        base, size = int(path.name), path.stat().st_size
        if base >= offset and base > 0:
            path.unlink()
        elif base <= offset < base + size:
            _zero_from(path, offset - base)
    (store_dir / "checkpoint").unlink(missing_ok=True)
    (store_dir / "checkpoint.bak").unlink(missing_ok=True)
    (store_dir / "abort").touch()
    return end - offset


def _zero_from(path: Path, pos: int) -> None:
    """Zero every chunk of ``path`` from ``pos`` that holds a non-zero byte."""
    with open(path, "r+b", buffering=0) as f:
        at = pos
        while True:
            f.seek(at)
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            if chunk.count(0) != len(chunk):
                f.seek(at)
                f.write(bytes(len(chunk)))
            at += len(chunk)
        os.fdatasync(f.fileno())


def _segments(store_dir: Path) -> list[Path]:
    directory = store_dir / "commitlog"
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
