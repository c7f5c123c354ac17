"""Tests for broker_core.store.index_file: one IndexFile's put, query, truncate and reopen."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker_core.errors import ConfigError, InvalidOffsetError, StoreClosedError
from broker_core.message import key_hash
from broker_core.store.index_file import IndexFile
from broker_core.store.index_layout import ENTRY, HEADER, INT32_MAX, SLOT
from broker_core.store.index_service import IndexService
from tests.store.index_support import COLLIDE_A, COLLIDE_B, ENTRIES, SLOTS, T0, new_file


def test_layout_sizes() -> None:
    assert (HEADER.size, SLOT.size, ENTRY.size) == (40, 4, 20)
    assert IndexFile.file_size(SLOTS, ENTRIES) == 40 + 64 * 4 + 200 * 20


def test_create_rejects_bad_dimensions(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        IndexFile.create(tmp_path / "x", 0, 10)
    with pytest.raises(ConfigError):
        IndexService(tmp_path, 8, 0)


def test_put_query_round_trip(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    assert index.is_empty and os.path.getsize(index.path) == IndexFile.file_size(SLOTS, ENTRIES)
    for i in range(10):
        assert index.put(f"key-{i % 3}", 100 * i, T0 + i)
    assert index.query("key-0", 0, 2**62, 100) == [900, 600, 300, 0]
    assert index.query("key-1", 0, 2**62, 100) == [700, 400, 100]
    assert index.query("missing", 0, 2**62, 100) == []
    assert (index.begin_phys_offset, index.end_phys_offset) == (0, 900)
    assert (index.begin_timestamp_ms, index.end_timestamp_ms) == (T0, T0 + 9)
    assert index.index_count == 10 and index.hash_slot_count_used == 3
    index.close()
    assert index.closed


def test_collisions_share_a_slot_and_chain(tmp_path: Path) -> None:
    index = new_file(tmp_path, slots=1)
    keys = ["a", "b", "c", "a", "b", "a"]
    for i, key in enumerate(keys):
        index.put(key, i * 10, T0)
    assert index.hash_slot_count_used == 1
    assert index.query("a", T0, T0, 10) == [50, 30, 0]
    assert index.query("b", T0, T0, 10) == [40, 10]
    assert index.query("c", T0, T0, 10) == [20]


def test_true_hash_collision_returns_both_keys(tmp_path: Path) -> None:
    assert key_hash(COLLIDE_A) == key_hash(COLLIDE_B)
    index = new_file(tmp_path)
    index.put(COLLIDE_A, 1, T0)
    index.put(COLLIDE_B, 2, T0)
    # The index cannot tell them apart; the store confirms the key from the message.
    assert index.query(COLLIDE_A, T0, T0, 10) == [2, 1]


def test_time_range_filter(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    for i in range(10):
        index.put("k", i, T0 + 1000 * i)
    assert index.query("k", T0 + 2000, T0 + 4000, 10) == [4, 3, 2]
    assert index.query("k", T0 + 2500, T0 + 2999, 10) == []
    assert index.query("k", 0, T0 - 1, 10) == []
    assert index.query("k", T0 + 9001, 2**62, 10) == []
    assert index.query("k", T0 + 9000, T0 + 9000, 10) == [9]


def test_max_results_and_duplicates(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    for i in range(20):
        index.put("k", i, T0)
    assert index.query("k", T0, T0, 3) == [19, 18, 17]
    assert index.query("k", T0, T0, 0) == []
    index.put("k", 20, T0)
    index.put("k", 20, T0)  # the same message filed twice under one key
    assert index.query("k", T0, T0, 2) == [20, 19]


def test_full_file_refuses(tmp_path: Path) -> None:
    index = new_file(tmp_path, entries=5)
    assert all(index.put("k", i, T0) for i in range(5))
    assert index.is_full
    assert not index.put("k", 5, T0)
    assert index.index_count == 5


def test_time_span_overflow_refuses(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    assert index.put("k", 0, T0)
    assert index.put("k", 1, T0 + INT32_MAX)
    assert not index.put("k", 2, T0 + INT32_MAX + 1)
    assert index.index_count == 2


def test_clock_step_back_is_clamped(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    index.put("k", 0, T0 + 100)
    index.put("k", 1, T0 + 50)  # the clock stepped back: recorded at the previous time
    assert index.end_timestamp_ms == T0 + 100
    assert index.query("k", T0 + 100, T0 + 100, 10) == [1, 0]


def test_out_of_order_phys_rejected(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    index.put("k", 100, T0)
    index.put("k", 100, T0)  # equal is fine: several keys of one message
    with pytest.raises(InvalidOffsetError):
        index.put("k", 99, T0)
    with pytest.raises(InvalidOffsetError):
        IndexFile.create(tmp_path / "20240101000000001", SLOTS, ENTRIES).put("k", -1, T0)


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    for i in range(50):
        index.put(f"k{i % 7}", i * 3, T0 + i)
    expected = {f"k{j}": index.query(f"k{j}", 0, 2**62, 100) for j in range(7)}
    index.flush()
    index.close()
    again = IndexFile.open(index.path, SLOTS, ENTRIES)
    assert not again.repaired_tail
    assert {k: again.query(k, 0, 2**62, 100) for k in expected} == expected
    assert (again.index_count, again.end_phys_offset, again.end_timestamp_ms) == (50, 147, T0 + 49)
    assert again.put("k0", 200, T0 + 100)
    assert again.query("k0", 0, 2**62, 1) == [200]


@pytest.mark.parametrize(
    ("cut", "survivors"),
    [
        (0, []),
        (1, [0]),
        (30, [0, 10, 20]),
        (35, [0, 10, 20, 30]),
        (90, [0, 10, 20, 30, 40, 50, 60, 70, 80]),
        (91, [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]),
        (10**9, [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]),
    ],
)
def test_truncate_from(tmp_path: Path, cut: int, survivors: list[int]) -> None:
    index = new_file(tmp_path, slots=3)
    for i in range(10):
        index.put(f"k{i % 4}", i * 10, T0 + i)
        index.put("all", i * 10, T0 + i)
    removed = index.truncate_from(cut)
    assert removed == 2 * (10 - len(survivors))
    assert sorted(index.query("all", 0, 2**62, 100)) == survivors
    for j in range(4):
        want = [p for p in survivors if (p // 10) % 4 == j][::-1]
        assert index.query(f"k{j}", 0, 2**62, 100) == want
    assert index.index_count == 2 * len(survivors)
    if survivors:
        assert index.end_phys_offset == survivors[-1]
        assert index.end_timestamp_ms == T0 + survivors[-1] // 10
    else:
        assert index.is_empty and index.hash_slot_count_used == 0
    # Later puts work, and the file still validates after a reopen.
    index.put("all", 1000, T0 + 50)
    index.close()
    again = IndexFile.open(index.path, 3, ENTRIES)
    assert again.query("all", 0, 2**62, 100) == [1000, *survivors[::-1]]


def test_closed_file_raises(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    index.close()
    index.close()
    with pytest.raises(StoreClosedError):
        index.put("k", 1, T0)
