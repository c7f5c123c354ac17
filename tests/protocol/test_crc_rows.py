"""Bulk CRC32 checks: every row zlib confirms passes, every damaged row is handed back."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from broker_core.errors import CorruptionError
from broker_core.message import Message
from broker_core.protocol import crc_rows, verify
from broker_core.protocol.crc_rows import C0, rows_to_recheck
from tests.store.conftest import seal


def _rows(
    rng: random.Random, count: int, lengths: list[int], fixed_bytes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """A buffer of spans with gaps between them, optional fixed parts, zlib's CRC of each."""
    parts, starts, span_lengths = [], [], []
    at = 0
    for _ in range(count):
        gap, size = rng.randint(0, 3), rng.choice(lengths)
        parts.append(rng.randbytes(gap + size))
        starts.append(at + gap)
        span_lengths.append(size)
        at += gap + size
    buf = np.frombuffer(b"".join(parts), np.uint8)
    fixed = (
        np.frombuffer(rng.randbytes(count * fixed_bytes), np.uint8).reshape(count, fixed_bytes)
        if fixed_bytes
        else None
    )
    expected = np.array(
        [
            zlib.crc32(b"" if fixed is None else fixed[i].tobytes(), zlib.crc32(buf[s : s + n]))
            for i, (s, n) in enumerate(zip(starts, span_lengths, strict=True))
        ],
        np.uint32,
    )
    return buf, np.array(starts), np.array(span_lengths), fixed, expected


def test_c0_takes_the_register_from_zero_to_zlibs_start() -> None:
    assert zlib.crc32(C0.tobytes(), 0xFFFFFFFF) == 0
    assert zlib.crc32(C0.tobytes() + b"abc", 0xFFFFFFFF) == zlib.crc32(b"abc")


@pytest.mark.parametrize(
    ("lengths", "fixed_bytes"),
    [([128], 0), ([128], 88), ([0, 1, 5, 300, 3000], 0), ([0, 7, 64, 65, 200], 88), ([0], 4)],
)
def test_matching_rows_pass_and_each_damaged_row_is_returned(
    lengths: list[int], fixed_bytes: int
) -> None:
    rng = random.Random(len(lengths) * 100 + fixed_bytes)
    buf, starts, span_lengths, fixed, expected = _rows(rng, 5_000, lengths, fixed_bytes)
    assert rows_to_recheck(buf, starts, span_lengths, fixed, expected).tolist() == []
    for row in rng.sample(range(len(starts)), 20):
        wrong = expected.copy()
        wrong[row] ^= np.uint32(1 << rng.randrange(32))
        suspects = rows_to_recheck(buf, starts, span_lengths, fixed, wrong)
        assert row in suspects.tolist()
        assert (np.diff(suspects) > 0).all()


def test_small_chunks_localise_damage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crc_rows, "CHUNK_BYTES", 1)  # one row a chunk
    rng = random.Random(5)
    buf, starts, span_lengths, fixed, expected = _rows(rng, 1_000, [10, 11, 300], 8)
    damaged = buf.copy()
    damaged[starts[700]] ^= 0x10
    suspects = rows_to_recheck(damaged, starts, span_lengths, fixed, expected)
    assert suspects.tolist() == [700]


def test_verify_units_names_every_damaged_unit_in_a_large_batch() -> None:
    rng = random.Random(11)
    parts = []
    for i in range(3_000):
        props = {"UNIQ_KEY": f"ID{i}", "TAGS": "t" * rng.randint(0, 60)}
        topic, body = "topic-" + "x" * rng.randint(0, 9), rng.randbytes(rng.randint(0, 400))
        msg = Message(topic, body, properties=props)
        parts.append(seal(msg, i, 0, 5_000))
    data = b"".join(parts)
    sizes = np.array([len(p) for p in parts], np.int32)
    assert len(verify.verify_units(data, sizes).starts) == len(parts)
    ends = np.cumsum(sizes)
    for _ in range(60):
        unit = rng.randrange(len(parts))
        # past the size/magic fields and outside queue_offset (which names the unit)
        pos = int(ends[unit] - sizes[unit]) + rng.choice([8, 12, 40, 99, 100, int(sizes[unit]) - 1])
        damaged = bytearray(data)
        damaged[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(CorruptionError, match=f"queue offset {unit}\\b|length|size"):
            verify.verify_units(bytes(damaged), sizes)


def test_large_spans_are_laid_out_a_few_rows_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    laid_out: list[int] = []
    real = crc_rows._chunk_matches

    def spy(*args: object) -> bool:
        laid_out.append(len(args[1]))  # type: ignore[arg-type]
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(crc_rows, "_chunk_matches", spy)
    rng = random.Random(3)
    buf, starts, span_lengths, fixed, expected = _rows(rng, 6, [1 << 20], 0)
    assert rows_to_recheck(buf, starts, span_lengths, fixed, expected).tolist() == []
    assert max(laid_out) <= 2  # ~2 MiB a chunk, not a fixed number of rows
