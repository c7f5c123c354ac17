"""Checking thousands of CRC32s with a few numpy calls and one ``zlib.crc32`` per chunk.

A bulk read verifies two CRC32s per unit; one ``zlib.crc32`` call per span costs more in
Python overhead than the CRC itself. Here the spans of a chunk of rows are laid out as
the rows of one 2-D array, each row built so that the CRC32 *register* returns to zero
after it exactly when the row's CRC matches::

    [zero padding][C0][span bytes …][fixed bytes …][~expected, little-endian]

From a zero register, zero bytes keep it zero; the 4 bytes ``C0`` (solved once, below)
bring it to zlib's initial register ``0xFFFFFFFF``; the span and fixed bytes then leave
``~crc`` in it; XORing in ``~expected`` (4 bytes) brings it back to zero iff
``crc == expected``. So one ``zlib.crc32`` over the whole array, started from a zero
register, ends at zero iff every row matched. A row that does not match leaves a non-zero
error that later rows only multiply by powers of x modulo the CRC polynomial (invertible),
so a single bad row is always caught; several bad rows cancel out only by a 2**-32
coincidence. The caller re-checks the rows of a failing chunk one by one to name the bad
unit, so the exact per-unit answer is never lost.

The variable-length span is right-aligned in its column block (copied with a sliding
window ending at its last byte; bytes before it zeroed), so a chunk costs about its
bytes, not per row. When span lengths differ by more than :data:`SORT_SPREAD` bytes the
rows are taken in order of length and cut into chunks whose longest span is at most
twice the shortest (plus SORT_SPREAD), so padding at most about doubles the bytes. Pure; any thread.

>>> import zlib
>>> data = np.frombuffer(b"hello world!", np.uint8)
>>> starts, lengths = np.array([0, 6]), np.array([5, 6])
>>> good = np.array([zlib.crc32(b"hello"), zlib.crc32(b"world!")], np.uint32)
>>> rows_to_recheck(data, starts, lengths, None, good).tolist()
[]
>>> rows_to_recheck(data, starts, lengths, None, good ^ np.uint32(1)).tolist()
[0, 1]
"""

from __future__ import annotations

import zlib
from typing import Final

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

CHUNK_BYTES: Final = 1 << 21  # laid-out bytes per zlib call: about the L2/L3 cache
_ZERO_REGISTER: Final = 0xFFFFFFFF  # zlib.crc32(data, value) starts from register ~value
_MASK32: Final = 0xFFFFFFFF
SORT_SPREAD: Final = 32  # rows are sorted by length when lengths differ by more


def _solve_c0() -> np.ndarray:
    """The 4 bytes that take the CRC32 register from 0 to 0xFFFFFFFF (zlib's start).

    Feeding 4 bytes from a zero register is linear and invertible in those bytes (it is
    multiplication by x**32 modulo the polynomial), so Gaussian elimination over GF(2)
    on the images of the 32 unit vectors solves it.
    """
    offset = zlib.crc32(bytes(4), _ZERO_REGISTER)  # image of 0, returned as ~register

    def image(word: int) -> int:
        return zlib.crc32(word.to_bytes(4, "little"), _ZERO_REGISTER) ^ offset

    pivots: dict[int, tuple[int, int]] = {}
    for bit in range(32):
        value, combo = image(1 << bit), 1 << bit
        for top in range(31, -1, -1):
            if not (value >> top) & 1:
                continue
            if top not in pivots:
                pivots[top] = (value, combo)
                break
            value, combo = value ^ pivots[top][0], combo ^ pivots[top][1]
    target, word = offset, 0  # want image(word) ^ offset == 0, returned as ~0xFFFFFFFF
    for top in range(31, -1, -1):
        if (target >> top) & 1:
            target, word = target ^ pivots[top][0], word ^ pivots[top][1]
    c0 = word.to_bytes(4, "little")
    if target or zlib.crc32(c0, _ZERO_REGISTER) != 0:
        raise AssertionError("no CRC32 start block")  # cannot happen: the map is invertible
    return np.frombuffer(c0, np.uint8)


C0: Final = _solve_c0()


def _right_aligned(
    out: np.ndarray, buf: np.ndarray, ends: np.ndarray, lengths: np.ndarray, width: int
) -> None:
    """Fill ``out`` (rows × (4 + width)) with C0 then each span, right-aligned, zero before."""
    window = width + 4
    if int(ends.min()) < window:  # a window would start before the buffer: pad it
        buf = np.concatenate([np.zeros(window, np.uint8), buf])
        ends = ends + window
    out[:] = sliding_window_view(buf, window)[ends - window]
    lead = width - lengths  # where C0 goes in each row
    if not lead.any():
        out[:, :4] = C0
        return
    steps = np.zeros(2 * window, np.uint8)  # row ``window - n`` of its windows: n zeros, ones
    steps[window:] = 1
    np.multiply(out, sliding_window_view(steps, window)[window - lead], out=out)
    rows = np.arange(len(lead))
    for k in range(4):
        out[rows, lead + k] = C0[k]


def _chunk_matches(
    buf: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    fixed: np.ndarray | None,
    expected: np.ndarray,
) -> bool:
    """True iff every row of this chunk matches (see the module docstring)."""
    width = int(lengths.max())
    tail = 0 if fixed is None else fixed.shape[1]
    out = np.empty((len(starts), 4 + width + tail + 4), np.uint8)
    _right_aligned(out[:, : 4 + width], buf, starts + lengths, lengths, width)
    if fixed is not None:
        out[:, 4 + width : 4 + width + tail] = fixed
    out[:, -4:] = (
        (expected.astype(np.uint32) ^ np.uint32(_MASK32))
        .astype("<u4")
        .view(np.uint8)
        .reshape(-1, 4)
    )
    return zlib.crc32(out.data, _ZERO_REGISTER) == _MASK32


def _chunks(lengths: np.ndarray, extra: int, *, sorted_: bool) -> list[slice]:
    """Row ranges of about :data:`CHUNK_BYTES` laid out; when ``lengths`` ascend, each
    range also keeps its longest span within twice its shortest plus SORT_SPREAD bytes."""
    count, first, parts = len(lengths), 0, []
    while first < count:
        if sorted_:
            widest = 2 * int(lengths[first]) + SORT_SPREAD
            stop = int(np.searchsorted(lengths, widest, side="right"))
        else:
            widest, stop = int(lengths.max()), count
        stop = min(stop, first + max(1, CHUNK_BYTES // (widest + extra)))
        parts.append(slice(first, stop))
        first = stop
    return parts


def rows_to_recheck(
    buf: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    fixed: np.ndarray | None,
    expected: np.ndarray,
) -> np.ndarray:
    """Rows whose CRC32 could not be confirmed in bulk; empty when every row matches.

    Row ``i`` is the bytes ``buf[starts[i] : starts[i] + lengths[i]]`` followed by
    ``fixed[i]`` (a ``(rows, k)`` uint8 array, or None), and ``expected[i]`` its CRC32
    (zlib's). The rows returned (ascending int64 indices) are those of chunks that held
    a mismatch or were too uneven to lay out: check them one by one.
    """
    count = len(starts)
    starts, lengths = starts.astype(np.int64), lengths.astype(np.int64)
    if not count:
        return np.zeros(0, np.int64)
    order = None
    if int(lengths.max()) - int(lengths.min()) > SORT_SPREAD:  # group rows of like length
        order = np.argsort(lengths, kind="stable")
        starts, lengths, expected = starts[order], lengths[order], expected[order]
        fixed = None if fixed is None else fixed[order]
    extra = 8 + (0 if fixed is None else fixed.shape[1])
    recheck: list[np.ndarray] = []
    for part in _chunks(lengths, extra, sorted_=order is not None):
        sub_fixed = None if fixed is None else fixed[part]
        if not _chunk_matches(buf, starts[part], lengths[part], sub_fixed, expected[part]):
            recheck.append(np.arange(part.start, part.stop, dtype=np.int64))
    if not recheck:
        return np.zeros(0, np.int64)
    rows = np.concatenate(recheck)
    return rows if order is None else np.sort(order[rows])
