from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.errors import CorruptionError, OffsetOutOfRangeError
from broker_core.store.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue, ConsumeQueueSet

PER_FILE = 10


def queue(tmp_path: Path) -> ConsumeQueue:
    return ConsumeQueue(tmp_path / "t" / "0", "t", 0, PER_FILE)


def filled(tmp_path: Path, count: int, start: int = 0) -> ConsumeQueue:
    cq = queue(tmp_path)
    for n in range(start, start + count):
        cq.put(n, n * 100, 100, n % 5)
    return cq


def test_units_are_twenty_bytes_at_offset_times_twenty(tmp_path: Path) -> None:
    cq = filled(tmp_path, 25)
    assert UNIT_SIZE == 20
    assert [cq.get_unit(n) for n in (0, 9, 10, 24)] == [
        (0, 100, 0),
        (900, 100, 4),
        (1000, 100, 0),
        (2400, 100, 4),
    ]
    files = sorted(p.name for p in cq.directory.iterdir())
    assert files == [f"{i * PER_FILE * 20:020d}" for i in range(3)]
    raw = (cq.directory / files[1]).read_bytes()
    assert UNIT.unpack_from(raw, 3 * 20) == (1300, 100, 3)
    assert (cq.min_offset, cq.max_offset) == (0, 25)


def test_reload_finds_min_and_max(tmp_path: Path) -> None:
    filled(tmp_path, 25).close()
    cq = queue(tmp_path)
    cq.load()
    assert (cq.min_offset, cq.max_offset) == (0, 25)
    cq.put(25, 2500, 100, 0)
    assert cq.get_unit(25) == (2500, 100, 0)


def test_queue_that_starts_mid_file_reloads_its_minimum(tmp_path: Path) -> None:
    filled(tmp_path, 5, start=13).close()
    cq = queue(tmp_path)
    cq.load()
    assert (cq.min_offset, cq.max_offset) == (13, 18)


def test_rewriting_an_existing_unit_is_ignored(tmp_path: Path) -> None:
    cq = filled(tmp_path, 3)
    cq.put(1, 777, 7, 7)
    assert cq.get_unit(1) == (100, 100, 1)


def test_truncate_from_physical(tmp_path: Path) -> None:
    cq = filled(tmp_path, 25)
    cq.truncate_from_physical(1250)  # units 13.. start at ≥ 1300
    assert cq.max_offset == 13
    assert len(list(cq.directory.iterdir())) == 2
    cq.close()
    cq = queue(tmp_path)
    cq.load()
    assert cq.max_offset == 13
    cq.put(13, 5000, 1, 0)
    assert cq.get_unit(13) == (5000, 1, 0)


def test_retention_moves_the_minimum_and_reads_below_fail(tmp_path: Path) -> None:
    cq = filled(tmp_path, 25)
    assert cq.delete_below_physical(1550) == 1  # file 0 (units 0-9) goes entirely
    assert cq.min_offset == 16
    with pytest.raises(OffsetOutOfRangeError, match=r"offset out of range \(min is 16"):
        cq.get_unit(15)
    assert cq.get_unit(16) == (1600, 100, 1)


def test_offset_for_timestamp_binary_search(tmp_path: Path) -> None:
    cq = filled(tmp_path, 25)
    store_time = {n * 100: 1000 + n * 10 for n in range(25)}  # phys → time
    assert cq.offset_for_timestamp(0, store_time.__getitem__) == 0
    assert cq.offset_for_timestamp(1000, store_time.__getitem__) == 0
    assert cq.offset_for_timestamp(1001, store_time.__getitem__) == 1
    assert cq.offset_for_timestamp(1120, store_time.__getitem__) == 12
    assert cq.offset_for_timestamp(99_999, store_time.__getitem__) == 25


def test_missing_file_in_the_middle_is_reported(tmp_path: Path) -> None:
    filled(tmp_path, 25).close()
    (tmp_path / "t" / "0" / f"{PER_FILE * 20:020d}").unlink()
    with pytest.raises(CorruptionError, match="missing"):
        queue(tmp_path).load()


def test_set_loads_everything_and_reports_failures(tmp_path: Path) -> None:
    qs = ConsumeQueueSet(tmp_path, PER_FILE)
    for topic in ("a", "b"):
        for qid in range(2):
            qs.find_or_create(topic, qid).put(0, 0, 10, 0)
    qs.close()
    bad = tmp_path / "b" / "1" / f"{0:020d}"
    bad.write_bytes(b"short")
    qs = ConsumeQueueSet(tmp_path, PER_FILE)
    failed = qs.load_all()
    assert list(failed) == [("b", 1)]
    assert qs.get("a", 1) is not None and qs.get("a", 1).max_offset == 1


def test_reload_of_a_partly_filled_single_file(tmp_path: Path) -> None:
    filled(tmp_path, 4).close()
    cq = queue(tmp_path)
    cq.load()
    assert (cq.min_offset, cq.max_offset) == (0, 4)


def test_verify_finds_units_that_cannot_be_commitlog_references(tmp_path: Path) -> None:
    cq = filled(tmp_path, 25)
    assert cq.verify(commitlog_end=2500) == ""
    assert "unit 24" in cq.verify(commitlog_end=2499)
    UNIT.pack_into(cq._files[1].buffer, 5 * 20, 50, 100, 0)  # unit 15 goes backwards
    assert "unit 15" in cq.verify(commitlog_end=2500)
