"""Tests for broker_core.store.index_service: file names, rolling, queries across files,
truncation, retention, repair after damage, and a model check."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import CorruptionError, InvalidOffsetError, StoreClosedError
from broker_core.message import key_hash
from broker_core.store.index_file import IndexFile
from broker_core.store.index_layout import ENTRY, HEADER, INT32_MAX, SLOT
from broker_core.store.index_manifest import MANIFEST_NAME, ms_for_name, name_for_ms, read_manifest
from broker_core.store.index_service import IndexService
from tests.store.index_support import COLLIDE_A, COLLIDE_B, T0, entry_pos, fill, index_files, patch

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


def test_put_batch_of_one_key_each_files_what_the_general_path_files(tmp_path: Path) -> None:
    """The one-key-per-message fast path (message ids alone) and the general path (a
    message with more keys in the batch) leave the same entries."""
    ids = [[f"ID{i:030d}"] for i in range(200)]
    mixed = [*ids[:-1], [ids[-1][0], "k", "k", ""]]
    phys = [100 * i for i in range(200)]
    with IndexService(tmp_path / "fast", 512, 1000) as fast:
        assert fast.put_batch(ids, phys, T0) == 200
        with IndexService(tmp_path / "general", 512, 1000) as general:
            assert general.put_batch(mixed, phys, T0) == 201
            for key in ("ID" + "0" * 30, ids[57][0], ids[-1][0]):
                assert fast.query(key, 0, 2**62, 5) == general.query(key, 0, 2**62, 5) != []
            assert general.query("k", 0, 2**62, 5) == [19900]
        with pytest.raises(InvalidOffsetError):
            fast.put_batch(ids, [p - 100 for p in phys], T0)
