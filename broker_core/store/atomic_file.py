"""Small metadata files written atomically, with a checksum and a ``.bak`` fallback.

Write: the new content goes to ``name.tmp`` (fsync), the current file becomes
``name.bak``, ``name.tmp`` becomes ``name``, then the directory is fsynced. A crash at any
point leaves either the new file or the previous one (as ``.bak``) intact.

Format: a JSON object ``{"format": 1, "crc32": N, "data": …}`` where ``crc32`` covers the
canonical (sorted-keys, compact) encoding of ``data``. A file that does not parse or whose
checksum fails is treated as missing and the ``.bak`` copy is used instead; which one was
used is reported so callers can log it.

Threads: writes of one file are serialised (a lock per path, process-wide): two writers
sharing ``name.tmp`` and the rename into ``.bak`` would otherwise rename each other's
files away (FileNotFoundError), e.g. a slave copying its master's group table while a
pull auto-creates a group. One store directory has one process (the store lock).
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core.errors import CorruptionError
from broker_core.store.mapped_file import fsync_dir

FORMAT = 1
_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _lock_of(path: Path) -> threading.Lock:
    key = path.absolute()
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def write_json_atomic(path: Path, data: Any) -> None:
    """Persist ``data`` (JSON-serialisable) to ``path`` atomically and durably; writers
    of one path take turns (see the module docstring)."""
    payload = _canonical(data)
    doc = {"format": FORMAT, "crc32": zlib.crc32(payload), "data": data}
    with _lock_of(path):
        _write_locked(path, doc)


def _write_locked(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(json.dumps(doc, sort_keys=True, indent=1).encode())
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclass(frozen=True, slots=True)
class Loaded:
    data: Any
    source: str  # "file", "backup" or "missing"
    problem: str  # why the main file was not used, "" when it was


def _load_one(path: Path) -> tuple[Any, str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, f"{path.name} is missing"
    try:
        doc = json.loads(raw)
        data = doc["data"]
        ok = doc.get("format") == FORMAT and doc.get("crc32") == zlib.crc32(_canonical(data))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None, f"{path.name} does not parse"
    if not ok:
        return None, f"{path.name} fails its checksum"
    return data, ""


def read_json_atomic(path: Path) -> Loaded:
    """Load what :func:`write_json_atomic` wrote, falling back to the backup copy."""
    data, problem = _load_one(path)
    if not problem:
        return Loaded(data, "file", "")
    backup, bak_problem = _load_one(path.with_name(path.name + ".bak"))
    if not bak_problem:
        return Loaded(backup, "backup", problem)
    return Loaded(None, "missing", problem)


def read_json_table(path: Path, what: str) -> Loaded:
    """Like :func:`read_json_atomic` for a table a component cannot start without.

    A file (or backup) that exists but does not load raises CorruptionError rather than
    starting empty and losing the table on the next write; a missing file is a new table.
    """
    loaded = read_json_atomic(path)
    if loaded.data is None and (path.exists() or path.with_name(path.name + ".bak").exists()):
        raise CorruptionError(f"{what} unreadable, backup too: {loaded.problem}", path=str(path))
    return loaded
