"""Index file names and the manifest of sealed index files.

Files are named by creation time, 17 digits ``yyyyMMddHHmmssSSS`` (UTC):
:func:`name_for_ms` and its inverse :func:`ms_for_name`. ``manifest.json`` records each
sealed file (a file that filled, or ran out of time span, and was rolled): version, then
one record per file with name, begin/end phys and index_count. It is written through
``atomic_file`` (CRC-checked, the previous copy kept as ``.bak``); :func:`read_manifest`
falls back to the ``.bak`` when the manifest is corrupt and reports the problem, so the
index service can notice sealed files that went missing and re-derive what was lost.

Pure functions over one directory; the index service serialises the calls.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.index_file import IndexFile

NAME_RE = re.compile(r"^\d{17}$")
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


def name_for_ms(epoch_ms: int) -> str:
    """The 17-digit ``yyyyMMddHHmmssSSS`` (UTC) name for a creation time."""
    seconds, millis = divmod(epoch_ms, 1000)
    stamp = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y%m%d%H%M%S")
    return f"{stamp}{millis:03d}"


def ms_for_name(name: str) -> int | None:
    """Inverse of :func:`name_for_ms`; None if ``name`` is not an index file name."""
    if not NAME_RE.match(name):
        return None
    try:
        moment = datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp()) * 1000 + int(name[14:])


@dataclass(frozen=True, slots=True)
class SealedFile:
    """A manifest record: a file that filled (or ran out of time span) and was rolled."""

    name: str
    begin_phys: int
    end_phys: int
    index_count: int

    @classmethod
    def of(cls, index: IndexFile) -> SealedFile:
        return cls(index.name, index.begin_phys_offset, index.end_phys_offset, index.index_count)

    def matches(self, index: IndexFile) -> bool:
        return self == SealedFile.of(index)


def write_manifest(directory: Path, sealed: Iterable[SealedFile]) -> None:
    """Replace ``manifest.json`` through ``atomic_file`` (CRC-checked, previous copy kept
    as ``manifest.json.bak``)."""
    doc = {
        "version": MANIFEST_VERSION,
        "sealed": [
            {
                "name": s.name,
                "begin_phys": s.begin_phys,
                "end_phys": s.end_phys,
                "index_count": s.index_count,
            }
            for s in sorted(sealed, key=lambda s: s.name)
        ],
    }
    write_json_atomic(directory / MANIFEST_NAME, doc)


def read_manifest(directory: Path) -> tuple[dict[str, SealedFile], str]:
    """The manifest's records by name, and a problem description ("" if none).

    A manifest that fails its CRC or does not parse is replaced by its ``.bak`` (named in
    the problem); with neither usable the records are empty: the caller re-derives them
    from the files and sealed-file losses since the last good manifest cannot be checked.
    A manifest written before the CRC format (plain JSON) is still read.
    """
    path = directory / MANIFEST_NAME
    loaded = read_json_atomic(path)
    doc: Any = loaded.data
    problem = ""
    if loaded.source == "backup":
        problem = f"{loaded.problem}; using {MANIFEST_NAME}.bak"
    elif doc is None:
        doc = _legacy_manifest(path)
        if doc is None:
            if not (path.exists() or path.with_name(MANIFEST_NAME + ".bak").exists()):
                return {}, ""
            return {}, f"{loaded.problem}, no usable backup; sealed-file losses cannot be checked"
    try:
        records = _records(doc)
    except (KeyError, TypeError, ValueError) as exc:
        return {}, f"{MANIFEST_NAME} malformed ({exc!r}); sealed-file losses cannot be checked"
    if loaded.source == "backup":
        records = _without_retired(directory, records)
    return {r.name: r for r in records}, problem


def _without_retired(directory: Path, records: list[SealedFile]) -> list[SealedFile]:
    """Drop backup records older than every file present: retention deletes oldest first
    and the backup predates the manifest that forgot them, so they are not losses."""
    present = [n for n in os.listdir(directory) if ms_for_name(n) is not None]
    oldest = min(present, default=None)
    return [r for r in records if oldest is not None and r.name >= oldest]


def _records(doc: Any) -> list[SealedFile]:
    if doc["version"] != MANIFEST_VERSION:
        raise ValueError(f"version {doc['version']!r}")
    return [
        SealedFile(str(r["name"]), int(r["begin_phys"]), int(r["end_phys"]), int(r["index_count"]))
        for r in doc["sealed"]
    ]


def _legacy_manifest(path: Path) -> Any:
    """The plain-JSON manifest of older versions (no CRC), or None."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "version" in doc and "crc32" not in doc else None
