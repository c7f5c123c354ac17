"""Helpers of the index tests: small files, raw byte patches, a known CRC32 collision."""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.store.index_file import IndexFile
from broker_core.store.index_layout import ENTRY, HEADER, SLOT
from broker_core.store.index_manifest import ms_for_name
from broker_core.store.index_service import IndexService

SLOTS, ENTRIES = 64, 200
T0 = 1_700_000_000_000  # a store timestamp in ms
# A known CRC32 collision: different keys, same key_hash.
COLLIDE_A, COLLIDE_B = "plumless", "buckeroo"


def new_file(tmp_path: Path, slots: int = SLOTS, entries: int = ENTRIES) -> IndexFile:
    return IndexFile.create(tmp_path / "20240101000000000", slots, entries)


def entry_pos(slots: int, number: int) -> int:
    return HEADER.size + slots * SLOT.size + (number - 1) * ENTRY.size


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def index_files(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ms_for_name(n) is not None)


def fill(svc: IndexService, count: int, start: int = 0) -> None:
    """Message i at phys 100*i, time T0 + i, keys: its id and the shared key 'all'."""
    for i in range(start, start + count):
        svc.put_keys([f"id{i}", "all"], 100 * i, T0 + i)
