"""row_crcs: every row's CRC equals zlib's, patched or computed one call per row."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from broker_core.protocol.row_crc import MAX_PATCHED_COLUMNS, row_crcs


def _zlib_rows(rows: np.ndarray) -> list[int]:
    return [zlib.crc32(row.tobytes()) for row in rows]


@pytest.mark.parametrize(
    ("count", "width", "columns"),
    [
        (256, 128, 0),  # equal rows: one call
        (256, 145, 12),  # ids and a body CRC differ
        (64, 40, MAX_PATCHED_COLUMNS),  # the most columns patched
        (64, 40, MAX_PATCHED_COLUMNS + 1),  # one more: one call per row
        (300, 128, 128),  # distinct bodies: one call per row
        (5, 30, 3),  # fewer rows than the patch pays for
        (1, 17, 0),
        (9, 1, 1),
    ],
)
def test_row_crcs_equal_zlib(count: int, width: int, columns: int) -> None:
    rng = np.random.default_rng(count * 1000 + width + columns)
    rows = np.tile(rng.integers(0, 256, width, dtype=np.uint8), (count, 1))
    varying = rng.choice(width, columns, replace=False)
    rows[:, varying] = rng.integers(0, 256, (count, columns), dtype=np.uint8)
    got = row_crcs(rows)
    assert got.dtype == np.uint32
    assert got.tolist() == _zlib_rows(rows)


def test_row_crcs_of_every_byte_value_at_each_end() -> None:
    """Each byte value in the first and the last column (the tables' two extremes)."""
    rows = np.zeros((256, 70), np.uint8)
    rows[:, 0] = np.arange(256)
    rows[:, -1] = np.arange(256)[::-1]
    assert row_crcs(rows).tolist() == _zlib_rows(rows)


def test_a_row_differing_only_from_the_first_is_caught() -> None:
    """Only the first row differs from the rest (the probe compares the last)."""
    rows = np.full((32, 50), 7, np.uint8)
    rows[0] = np.arange(50)
    assert row_crcs(rows).tolist() == _zlib_rows(rows)
