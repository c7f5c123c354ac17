"""Tests for broker_core.store.index_validate: damaged index files are refused on open,
naming the byte; a torn put is rolled back; a damaged chain never loops a query."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from broker_core.errors import CorruptionError
from broker_core.message import key_hash
from broker_core.store.index_file import IndexFile
from broker_core.store.index_layout import ENTRY, HEADER, SLOT
from tests.store.index_support import ENTRIES, SLOTS, T0, entry_pos, new_file, patch


def test_open_rejects_wrong_size(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    index.put("k", 1, T0)
    index.close()
    with open(index.path, "r+b") as fh:
        fh.truncate(1000)
    with pytest.raises(CorruptionError) as info:
        IndexFile.open(index.path, SLOTS, ENTRIES)
    assert info.value.path == str(index.path) and info.value.position == 1000


def test_open_rejects_garbage_header(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    for i in range(5):
        index.put("k", i, T0)
    index.close()
    patch(index.path, 0, bytes(range(7, 47)))
    with pytest.raises(CorruptionError) as info:
        IndexFile.open(index.path, SLOTS, ENTRIES)
    assert str(index.path) in str(info.value) and 0 <= info.value.position < 40


@pytest.mark.parametrize("page", [0, 1])
def test_open_rejects_zeroed_page(tmp_path: Path, page: int) -> None:
    index = new_file(tmp_path)  # 4296 bytes: page 1 holds the last ten entries
    for i in range(ENTRIES):
        index.put(f"k{i}", i, T0 + i)
    index.close()
    patch(index.path, page * 4096, bytes(4096)[: IndexFile.file_size(SLOTS, ENTRIES) - page * 4096])
    with pytest.raises(CorruptionError):
        IndexFile.open(index.path, SLOTS, ENTRIES)


def test_open_rejects_broken_chain_and_slot(tmp_path: Path) -> None:
    index = new_file(tmp_path, slots=1)
    for i in range(5):
        index.put("k", i, T0)
    index.close()
    patch(index.path, entry_pos(1, 3) + 16, SLOT.pack(3))  # entry 3 links to itself
    with pytest.raises(CorruptionError) as info:
        IndexFile.open(index.path, 1, ENTRIES)
    assert info.value.position == entry_pos(1, 3) + 16
    patch(index.path, entry_pos(1, 3) + 16, SLOT.pack(2))
    IndexFile.open(index.path, 1, ENTRIES).close()
    patch(index.path, HEADER.size, SLOT.pack(9))  # slot points past index_count
    with pytest.raises(CorruptionError) as info:
        IndexFile.open(index.path, 1, ENTRIES)
    assert info.value.position == HEADER.size


@pytest.mark.parametrize(
    ("field", "offset", "value", "text"),
    [
        ("prev", 16, SLOT.pack(0), "links to"),
        ("phys", 4, struct.pack(">q", 1), "phys offset"),
        ("diff", 12, struct.pack(">i", 0), "time diff"),
    ],
)
def test_open_names_the_first_entry_out_of_line(
    tmp_path: Path, field: str, offset: int, value: bytes, text: str
) -> None:
    index = new_file(tmp_path, slots=4)
    for i in range(60):
        index.put(f"k{i % 6}", 100 + i, T0 + i)
    index.close()
    patch(index.path, entry_pos(4, 37) + offset, value)
    with pytest.raises(CorruptionError, match=text) as info:
        IndexFile.open(index.path, 4, ENTRIES)
    assert info.value.position == entry_pos(4, 37) + offset


def test_query_stops_on_a_looping_chain(tmp_path: Path) -> None:
    index = new_file(tmp_path, slots=1)
    for i in range(5):
        index.put("k", i, T0)
    patch(index.path, entry_pos(1, 3) + 16, SLOT.pack(4))  # 3 -> 4: would loop forever
    result: list[list[int]] = []
    worker = threading.Thread(
        target=lambda: result.append(index.query("k", T0, T0, 100)), daemon=True
    )
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "query looped on a damaged chain"
    assert result == [[4, 3, 2]]


def test_open_rolls_back_a_torn_put(tmp_path: Path) -> None:
    index = new_file(tmp_path, slots=1)
    for i in range(3):
        index.put("k", i, T0)
    index.close()
    # A put of entry 4 that wrote its entry and slot head but died before the header.
    patch(index.path, entry_pos(1, 4), ENTRY.pack(key_hash("k"), 3, 0, 3))
    patch(index.path, HEADER.size, SLOT.pack(4))
    again = IndexFile.open(index.path, 1, ENTRIES)
    assert again.repaired_tail
    assert again.query("k", T0, T0, 10) == [2, 1, 0]
    assert again.put("k", 3, T0)
    assert again.query("k", T0, T0, 10) == [3, 2, 1, 0]
