"""Tests for broker_core.store.index_file: one IndexFile and the IndexService."""

from __future__ import annotations

import os
import struct
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import (
    ConfigError,
    CorruptionError,
    InvalidOffsetError,
    StoreClosedError,
)
from broker_core.message import key_hash
from broker_core.store.index_file import ENTRY, HEADER, INT32_MAX, SLOT, IndexFile
from broker_core.store.index_service import (
    MANIFEST_NAME,
    IndexService,
    ms_for_name,
    name_for_ms,
    read_manifest,
)

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


# -- IndexFile ---------------------------------------------------------------------------


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


def test_closed_file_raises(tmp_path: Path) -> None:
    index = new_file(tmp_path)
    index.close()
    index.close()
    with pytest.raises(StoreClosedError):
        index.put("k", 1, T0)


# -- names -------------------------------------------------------------------------------


def test_names_are_17_digit_utc_times() -> None:
    assert name_for_ms(0) == "19700101000000000"
    assert name_for_ms(T0 + 7) == "20231114221320007"
    assert ms_for_name(name_for_ms(T0 + 7)) == T0 + 7
    assert ms_for_name(MANIFEST_NAME) is None
    assert ms_for_name("99999999999999999") is None


def test_names_bump_when_the_clock_does_not_move(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 4, 2, clock_ms=lambda: T0)
    for i in range(6):
        svc.put_keys(["k"], i, T0)
    assert svc.file_names == [name_for_ms(T0), name_for_ms(T0 + 1), name_for_ms(T0 + 2)]
    svc.close()


# -- IndexService ------------------------------------------------------------------------


def fill(svc: IndexService, count: int, start: int = 0) -> None:
    """Message i at phys 100*i, time T0 + i, keys: its id and the shared key 'all'."""
    for i in range(start, start + count):
        svc.put_keys([f"id{i}", "all"], 100 * i, T0 + i)


def test_service_lazy_create_roll_and_query(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    assert svc.file_names == [] and svc.max_phys_offset == -1
    fill(svc, 12)  # 24 entries: files of 10, 10, 4
    assert len(svc.file_names) == 3 and svc.sealed_names == svc.file_names[:2]
    assert svc.query("all", 0, 2**62, 100) == [100 * i for i in range(11, -1, -1)]
    assert svc.query("all", T0 + 3, T0 + 8, 100) == [800, 700, 600, 500, 400, 300]
    assert svc.query("all", 0, 2**62, 5) == [1100, 1000, 900, 800, 700]
    assert svc.query("id4", 0, 2**62, 5) == [400]
    assert svc.max_phys_offset == 1100
    sealed, problem = read_manifest(tmp_path)
    assert problem == "" and [r.index_count for r in sealed.values()] == [10, 10]
    svc.close()
    with pytest.raises(StoreClosedError):
        svc.query("all", 0, 1, 1)


def test_service_rejects_out_of_order_and_dedupes_keys(tmp_path: Path) -> None:
    with IndexService(tmp_path, 8, 10) as svc:
        assert svc.put_keys(["a", "a", "", "b"], 10, T0) == 2
        with pytest.raises(InvalidOffsetError):
            svc.put_keys(["a"], 9, T0)
        assert svc.query("a", 0, 2**62, 10) == [10]


def test_service_reopen_keeps_everything(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 12)
    before = svc.query("all", 0, 2**62, 100)
    names = svc.file_names
    svc.close()
    again = IndexService(tmp_path, 8, 10)
    assert again.validate_and_repair() == [] and again.rebuild_from is None
    assert again.file_names == names and again.query("all", 0, 2**62, 100) == before
    fill(again, 3, start=12)
    assert again.query("all", 0, 2**62, 3) == [1400, 1300, 1200]
    again.close()


@pytest.mark.parametrize("cut", [0, 450, 500, 501, 1000, 1100, 5000])
def test_service_truncate_from(tmp_path: Path, cut: int) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 12)
    svc.truncate_from(cut)
    survivors = [100 * i for i in range(12) if 100 * i < cut]
    assert svc.query("all", 0, 2**62, 100) == survivors[::-1]
    assert svc.max_phys_offset == (survivors[-1] if survivors else -1)
    fill(svc, 2, start=len(survivors))  # re-dispatch continues in phys order
    assert svc.query("all", 0, 2**62, 3)[0] == 100 * (len(survivors) + 1)
    svc.close()
    again = IndexService(tmp_path, 8, 10)
    assert again.validate_and_repair() == []
    assert len(again.query("all", 0, 2**62, 100)) == len(survivors) + 2
    again.close()


def test_service_delete_before(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 17)  # files: msgs 0-4, 5-9, 10-14, 15-16
    names = svc.file_names
    assert svc.delete_before(400) == []  # the first file ends at phys 400
    assert svc.delete_before(450) == names[:1]
    assert svc.file_names == names[1:]
    assert svc.delete_before(10**9) == names[1:3]  # never the newest
    assert svc.file_names == names[3:] and svc.sealed_names == []
    assert svc.query("all", 0, 2**62, 100) == [1600, 1500]
    svc.close()
    again = IndexService(tmp_path, 8, 10)
    assert again.validate_and_repair() == []
    again.close()


def test_service_delete_before_returns_names(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 12)
    first = svc.file_names[0]
    assert svc.delete_before(401) == [first]
    svc.close()


def corrupt(path: Path, how: str) -> None:
    if how == "garbage header":
        patch(path, 0, os.urandom(40))
    elif how == "zeroed":
        patch(path, 0, bytes(os.path.getsize(path)))
        patch(path, entry_pos(8, 10), b"\x01")  # a stray byte past the header
    else:
        with open(path, "r+b") as fh:
            fh.truncate(100)


@pytest.mark.parametrize("how", ["garbage header", "zeroed", "truncated"])
def test_corrupt_newest_file_is_dropped_and_reported(tmp_path: Path, how: str) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 12)  # newest file holds messages 10 and 11 (phys 1000, 1100)
    newest = svc.file_names[-1]
    svc.close()
    with pytest.raises(CorruptionError) as info:
        corrupt(tmp_path / newest, how)
        IndexFile.open(tmp_path / newest, 8, 10)
    assert info.value.path == str(tmp_path / newest)
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert any(newest in line and "failed validation" in line for line in report)
    assert newest not in index_files(tmp_path)
    # The range is unknown, so everything after the last good entry (phys 900) is redone.
    assert svc.rebuild_from == 900
    assert svc.max_phys_offset == 800
    fill(svc, 3, start=9)
    assert svc.query("all", 0, 2**62, 100) == [100 * i for i in range(11, -1, -1)]
    svc.mark_rebuilt()
    assert svc.rebuild_from is None
    svc.close()


def test_corrupt_sealed_file_uses_manifest_range(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 12)
    middle = svc.file_names[1]  # messages 5-9
    svc.close()
    corrupt(tmp_path / middle, "garbage header")
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert any(middle in line and "[500, 900]" in line for line in report)
    assert svc.rebuild_from == 500
    assert svc.query("all", 0, 2**62, 100) == [400, 300, 200, 100, 0]
    assert svc.validate_and_repair() == []  # reported once
    assert svc.rebuild_from == 500  # kept until the store says it re-dispatched
    svc.close()


def test_deleted_sealed_file_is_noticed_via_manifest(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 17)
    names = svc.file_names
    svc.close()
    os.remove(tmp_path / names[1])  # sealed: messages 5-9
    svc = IndexService(tmp_path, 8, 10)
    report = svc.validate_and_repair()
    assert any(names[1] in line and "missing" in line and "[500, 900]" in line for line in report)
    assert svc.rebuild_from == 500 and svc.max_phys_offset == 400
    assert svc.file_names == names[:1]
    fill(svc, 12, start=5)
    assert svc.query("all", 0, 2**62, 100) == [100 * i for i in range(16, -1, -1)]
    svc.close()
    again = IndexService(tmp_path, 8, 10)
    assert again.validate_and_repair() == [] and again.rebuild_from is None
    again.close()


def test_deleted_file_at_runtime_found_by_validate(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    fill(svc, 12)
    first = svc.file_names[0]
    os.remove(tmp_path / first)
    report = svc.validate_and_repair()
    assert any(first in line for line in report) and svc.rebuild_from == 0
    assert svc.max_phys_offset == -1
    svc.close()


def test_time_overflow_rolls_and_sealed_newest_is_not_reused(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 8, 10)
    svc.put_keys(["k"], 0, T0)
    svc.put_keys(["k"], 1, T0 + INT32_MAX + 5)  # too far from the first file's time base
    first, second = svc.file_names
    assert svc.sealed_names == [first]
    svc.close()
    os.remove(tmp_path / second)  # as if the crash came between sealing and creating
    svc = IndexService(tmp_path, 8, 10)
    assert svc.validate_and_repair() == []
    svc.put_keys(["k"], 2, T0 + 1)
    assert len(svc.file_names) == 2 and svc.file_names[0] == first
    svc.close()
    again = IndexService(tmp_path, 8, 10)
    assert again.validate_and_repair() == []
    assert again.query("k", 0, 2**62, 10) == [2, 0]
    again.close()


def test_torn_put_reported_by_service(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 1, 10)
    fill(svc, 2)
    name = svc.file_names[0]
    svc.close()
    patch(tmp_path / name, entry_pos(1, 5), ENTRY.pack(key_hash("x"), 300, 0, 4))
    patch(tmp_path / name, HEADER.size, SLOT.pack(5))
    svc = IndexService(tmp_path, 1, 10)
    report = svc.validate_and_repair()
    assert len(report) == 1 and "rolled back" in report[0]
    assert svc.rebuild_from is None and svc.max_phys_offset == 100
    svc.close()


def test_concurrent_queries_see_consistent_state(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 16, 50)
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            found = svc.query("all", 0, 2**62, 1000)
            if found != sorted(found, reverse=True) or any(p % 100 for p in found):
                errors.append(repr(found[:5]))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        fill(svc, 400)
        svc.truncate_from(20_000)
        fill(svc, 50, start=200)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert len(svc.query("all", 0, 2**62, 1000)) == 250
    svc.close()


# -- model-based -------------------------------------------------------------------------

KEYS = ["a", "b", "c", "d", COLLIDE_A, COLLIDE_B]

put_op = st.tuples(
    st.just("put"),
    st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
    st.integers(0, 3),
    st.integers(0, 2),
)
truncate_op = st.tuples(st.just("truncate"), st.integers(0, 80))
reopen_op = st.tuples(st.just("reopen"))
ops_strategy = st.lists(
    st.one_of(put_op, put_op, put_op, truncate_op, reopen_op), min_size=1, max_size=40
)


def model_query(
    model: list[tuple[str, int, int]], key: str, begin: int, end: int, limit: int
) -> list[int]:
    out: list[int] = []
    for k, phys, ts in reversed(model):
        if key_hash(k) == key_hash(key) and begin <= ts <= end and phys not in out:
            out.append(phys)
    return out[:limit]


def check_against_model(svc: IndexService, model: list[tuple[str, int, int]]) -> None:
    assert svc.max_phys_offset == (model[-1][1] if model else -1)
    times = sorted({ts for _, _, ts in model}) or [T0]
    lo, hi = times[len(times) // 3], times[-1 - len(times) // 3]
    for key in KEYS:
        assert svc.query(key, 0, 2**62, 1000) == model_query(model, key, 0, 2**62, 1000)
        assert svc.query(key, lo, hi, 3) == model_query(model, key, lo, hi, 3)


@settings(max_examples=100, deadline=None)
@given(ops=ops_strategy)
def test_matches_a_simple_model(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        svc = IndexService(tmp, 4, 5)
        model: list[tuple[str, int, int]] = []
        phys, now = 0, T0
        for op in ops:
            if op[0] == "put":
                _, keys, phys_step, time_step = op
                phys, now = phys + phys_step, now + time_step
                svc.put_keys(keys, phys, now)
                model.extend((k, phys, now) for k in dict.fromkeys(keys))
            elif op[0] == "truncate":
                svc.truncate_from(op[1])
                model = [e for e in model if e[1] < op[1]]
                phys = min(phys, op[1])
            else:
                svc.close()
                svc = IndexService(tmp, 4, 5)
                assert svc.validate_and_repair() == [] and svc.rebuild_from is None
            check_against_model(svc, model)
        svc.close()
