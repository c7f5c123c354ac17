"""Batch writes of derived files (dispatch writes one block per queue and per index file).

Each batch write must leave exactly the bytes the one-at-a-time write leaves, so files
written either way read, validate and recover alike.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import InvalidOffsetError
from broker_core.message import key_hash
from broker_core.store.consume_queue import UNIT_DTYPE, ConsumeQueue
from broker_core.store.index_file import IndexFile
from broker_core.store.index_layout import HEADER
from broker_core.store.index_service import IndexService

T0 = 1_700_000_000_000
KEYS = st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=3), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(keys=KEYS, split=st.integers(0, 60), slots=st.sampled_from([1, 3, 64]))
def test_put_many_writes_what_put_writes(
    tmp_path_factory: pytest.TempPathFactory, keys: list[str], split: int, slots: int
) -> None:
    root = tmp_path_factory.mktemp("idx")
    one = IndexFile.create(root / "20240101000000000", slots, 100)
    many = IndexFile.create(root / "20240101000000001", slots, 100)
    phys = [10 * (i // 2) for i in range(len(keys))]  # two keys per message
    for key, offset in zip(keys, phys, strict=True):
        assert one.put(key, offset, T0)
    hashes = np.array([key_hash(k) for k in keys], np.uint32)
    offsets = np.array(phys, np.int64)
    cut = min(split, len(keys))
    assert many.put_many(hashes[:cut], offsets[:cut], T0) == cut
    assert many.put_many(hashes[cut:], offsets[cut:], T0) == len(keys) - cut
    one.flush()
    many.flush()
    assert one.path.read_bytes() == many.path.read_bytes()
    one.close()
    many.close()
    again = IndexFile.open(many.path, slots, 100)  # validates every link
    assert again.index_count == len(keys)
    again.close()


def test_put_many_stops_when_full_and_refuses_going_back(tmp_path: Path) -> None:
    index = IndexFile.create(tmp_path / "20240101000000000", 4, 5)
    hashes = np.array([key_hash(f"k{i}") for i in range(8)], np.uint32)
    assert index.put_many(hashes, np.arange(8, dtype=np.int64), T0) == 5
    assert index.is_full
    with pytest.raises(InvalidOffsetError):
        index.put_many(hashes[:1], np.array([3], np.int64), T0)
    index.close()
    fresh = IndexFile.create(tmp_path / "20240101000000001", 4, 5)
    with pytest.raises(InvalidOffsetError):
        fresh.put_many(hashes[:2], np.array([9, 8], np.int64), T0)  # not in order
    fresh.close()


def test_torn_batch_put_is_rolled_back(tmp_path: Path) -> None:
    """A crash after the entries and slots of a batch, before its header: open undoes it."""
    index = IndexFile.create(tmp_path / "20240101000000000", 2, 50)
    index.put_many(
        np.array([key_hash("a"), key_hash("b")], np.uint32), np.array([0, 1], np.int64), T0
    )
    header = bytes(index._map()[: HEADER.size])
    index.put_many(
        np.array([key_hash(k) for k in "abcab"], np.uint32), np.arange(2, 7, dtype=np.int64), T0
    )
    index._map()[: HEADER.size] = header  # the header write never happened
    index.flush()
    index.close()
    again = IndexFile.open(index.path, 2, 50)
    assert again.repaired_tail
    assert again.index_count == 2
    assert again.query("a", T0, T0, 10) == [0]
    assert again.put("a", 9, T0)
    assert again.query("a", T0, T0, 10) == [9, 0]
    again.close()


@pytest.mark.parametrize("messages", [6, 40])  # below and above the one-by-one threshold
def test_service_put_batch_rolls_files(tmp_path: Path, messages: int) -> None:
    svc = IndexService(tmp_path, 8, 30)
    keys = [[f"id{i}", f"k{i % 3}", f"id{i}"] for i in range(messages)]  # duplicates filed once
    assert svc.put_batch(keys, [100 * i for i in range(messages)], T0) == 2 * messages
    assert len(svc.file_names) == -(-2 * messages // 30)
    for i in range(messages):
        assert svc.query(f"id{i}", T0, T0, 5) == [100 * i]
    assert svc.query("k0", T0, T0, 100) == [
        100 * i for i in range(messages - 1, -1, -1) if i % 3 == 0
    ]
    svc.close()


def units(phys: list[int]) -> np.ndarray:
    out = np.empty(len(phys), UNIT_DTYPE)
    out["phys"], out["size"], out["tag"] = phys, 50, 7
    return out


def test_queue_put_many_spans_files_and_skips_written(tmp_path: Path) -> None:
    one = ConsumeQueue(tmp_path / "a" / "0", "a", 0, 4)
    many = ConsumeQueue(tmp_path / "b" / "0", "b", 0, 4)
    for offset in range(11):
        one.put(offset, 100 * offset, 50, 7)
    many.put_many(0, units([100 * i for i in range(3)]))
    many.put_many(1, units([100 * i for i in range(1, 11)]))  # 1, 2 already there
    assert (many.min_offset, many.max_offset) == (0, 11)
    assert [many.get_unit(i) for i in range(11)] == [one.get_unit(i) for i in range(11)]
    assert len(list((tmp_path / "b" / "0").iterdir())) == 3
