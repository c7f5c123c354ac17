"""The vectorised parts of an index batch: ``key_hashes`` must give ``key_hash`` of every
key, ``link`` must link as ``chain`` does, and a service fed by ``put_batch`` must leave
the same bytes as one fed message by message through ``put_keys``."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.client.message_ids import IdBlocks
from broker_core.message import key_hash, new_message_id
from broker_core.store.index_layout import (
    KEY_HASH_MAX_BYTES,
    KEY_HASH_MIN_KEYS,
    _crc32_tables,
    chain,
    key_hashes,
    link,
    uniform_key_hashes,
)
from broker_core.store.index_service import IndexService
from tests.store.index_support import T0, index_files

MANY = KEY_HASH_MIN_KEYS + 3  # enough keys for the byte-matrix path


def expected(keys: list[str]) -> list[int]:
    return [zlib.crc32(k.encode()) for k in keys]


def test_crc_tables_are_crc32s_linear_part() -> None:
    tables = _crc32_tables(6).reshape(6, 256)
    for d in range(6):
        for b in (0, 1, 0x5A, 0xFF):
            linear = zlib.crc32(bytes([b]) + bytes(d)) ^ zlib.crc32(bytes(d + 1))
            assert int(tables[d, b]) == linear


@pytest.mark.parametrize(
    "keys",
    [
        [new_message_id() for _ in range(256)],  # one shared prefix, a counter at the end
        [new_message_id() for _ in range(MANY - 3)],  # too few: one zlib call a key
        [f"ID{i:012d}" for i in range(300)],
        ["same-key"] * MANY,  # no column differs
        ["x" * KEY_HASH_MAX_BYTES] * (MANY - 1) + ["y" * KEY_HASH_MAX_BYTES],
        ["x" * (KEY_HASH_MAX_BYTES + 1)] * MANY,  # too long for the tables
        ["é" + f"{i:03d}" for i in range(MANY)],  # UTF-8: 5 bytes each
        ["ab", "é"] * MANY,  # 2 bytes each though of different character counts
        ["a\x00", "bc"] * MANY,  # a NUL inside a key
        ["ab", "a\x00"] * MANY,
        ["abc", "ab", "abcd"] * MANY,  # lengths differ
        ["", "a"] * MANY,  # an empty key
        [""] * MANY,
        [],
    ],
)
def test_key_hashes_are_key_hash(keys: list[str]) -> None:
    assert key_hashes(keys).dtype == np.uint32
    assert key_hashes(keys).tolist() == expected(keys)


@settings(max_examples=40, deadline=None)
@given(
    length=st.integers(1, KEY_HASH_MAX_BYTES + 2),
    alphabet=st.sampled_from(["01", "0123456789ABCDEF", "a\u00e9\x00z", "\x7f\x80\u20ac"]),
    rnd=st.randoms(use_true_random=False),
)
def test_key_hashes_of_one_length_are_key_hash(
    length: int, alphabet: str, rnd: random.Random
) -> None:
    """Keys of one character length: a few bases, each copy with a character or two
    changed (so columns differ here and there, and UTF-8 lengths may differ)."""
    bases = ["".join(rnd.choices(alphabet, k=length)) for _ in range(rnd.randint(1, 4))]
    keys = []
    for _ in range(MANY + rnd.randint(0, 20)):
        key = list(rnd.choice(bases))
        for _ in range(rnd.randint(0, 2)):
            key[rnd.randrange(length)] = rnd.choice(alphabet)
        keys.append("".join(key))
    assert key_hashes(keys).tolist() == expected(keys)


def test_key_hashes_of_client_id_blocks() -> None:
    prefix, first = IdBlocks().reserve(400)
    ids = [f"{prefix.decode()}{(first + n) & 0xFFFFFFFF:08X}" for n in range(400)]
    assert len(ids[0]) == 34
    assert uniform_key_hashes(ids) is not None  # the byte-matrix path, not the fallback
    assert key_hashes(ids).tolist() == [key_hash(i) for i in ids]


@settings(max_examples=60, deadline=None)
@given(unique=st.booleans(), first=st.integers(1, 1000), data=st.data())
def test_link_links_as_chain_does(unique: bool, first: int, data: st.DataObject) -> None:
    slots = data.draw(st.lists(st.integers(0, 40), min_size=1, max_size=80, unique=unique))
    heads = np.zeros(41, ">i4")
    heads[::3] = np.arange(0, 41, 3)  # some slots already hold entries, some are empty
    array = np.array(slots, np.uint32)
    numbers = np.arange(first, first + len(slots), dtype=np.int64)
    prev, touched, newest, fresh = link(array, numbers, heads)
    want_prev, want_touched, want_newest = chain(array, numbers, heads)
    assert np.asarray(prev, np.int64).tolist() == want_prev.tolist()
    assert dict(zip(touched.tolist(), newest.tolist(), strict=True)) == dict(
        zip(want_touched.tolist(), want_newest.tolist(), strict=True)
    )
    assert fresh == int(np.count_nonzero(heads[want_touched] == 0))


def test_link_short_cut_when_no_slot_repeats() -> None:
    heads = np.zeros(10, ">i4")
    heads[4] = 7
    prev, touched, newest, fresh = link(
        np.array([4, 1, 9], np.uint32), np.array([8, 9, 10], np.int64), heads
    )
    assert np.asarray(prev).tolist() == [7, 0, 0]
    assert touched.tolist() == [4, 1, 9] and newest.tolist() == [8, 9, 10]
    assert fresh == 2


def test_link_of_one_key_repeated_chains_every_entry() -> None:
    heads = np.zeros(4, ">i4")
    heads[2] = 5
    prev, touched, newest, fresh = link(
        np.array([2, 2, 2], np.uint32), np.array([6, 7, 8], np.int64), heads
    )
    assert np.asarray(prev).tolist() == [5, 6, 7]
    assert touched.tolist() == [2] and newest.tolist() == [8] and fresh == 0


def _batches(count: int) -> list[list[str]]:
    """Message ids, some messages with KEYS too (repeated, empty, shared)."""
    ids = [new_message_id() for _ in range(count)]
    return [
        [i, "order-7", "", "order-7", f"k{n % 5}"] if n % 7 == 3 else [i] for n, i in enumerate(ids)
    ]


@pytest.mark.parametrize("one_key_each", [True, False])
def test_put_batch_files_the_bytes_put_keys_files(tmp_path: Path, one_key_each: bool) -> None:
    """Across rolls (small files), a one-key batch and a mixed one, byte for byte."""
    keys = [[new_message_id()] for _ in range(700)] if one_key_each else _batches(700)
    phys = [64 * n for n in range(len(keys))]
    with (
        IndexService(tmp_path / "batch", 97, 300, clock_ms=lambda: T0) as batch,
        IndexService(tmp_path / "one", 97, 300, clock_ms=lambda: T0) as one,
    ):
        for start in range(0, len(keys), 256):
            part = slice(start, start + 256)
            written = batch.put_batch(keys[part], phys[part], T0 + start)
            assert written == sum(
                one.put_keys(k, p, T0 + start) for k, p in zip(keys[part], phys[part], strict=True)
            )
        for n in (0, 3, 299, 699):
            assert batch.query(keys[n][0], 0, 2**62, 3) == one.query(keys[n][0], 0, 2**62, 3)
            assert batch.query(keys[n][0], 0, 2**62, 3) == [phys[n]]
        if not one_key_each:
            found = batch.query("order-7", 0, 2**62, 1000)
            assert found == sorted(
                (p for k, p in zip(keys, phys, strict=True) if len(k) > 1), reverse=True
            )
    names = index_files(tmp_path / "batch")
    assert names == index_files(tmp_path / "one") and len(names) > 2
    for name in names:
        assert (tmp_path / "batch" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
