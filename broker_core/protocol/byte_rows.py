"""Fixed-width rows of a byte array: one gather or scatter through a strided view.

Units, their headers and tails, and properties of one length are all fixed-width byte
rows at known starts in a buffer; numpy reads or writes them at once through a view of
every window of the buffer (no index array of every byte).

>>> data = np.frombuffer(b"abcdef", np.uint8)
>>> rows_at(data, np.array([0, 3]), 2).tobytes()
b'abde'
"""

from __future__ import annotations

import numpy as np


def _windows(data: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of ``data`` (1-D uint8, contiguous) as a 2-D view."""
    return np.ndarray((max(len(data) - width + 1, 0), width), np.uint8, buffer=data, strides=(1, 1))


def rows_at(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """A copy of the ``width`` bytes at each of ``starts`` in ``data`` (uint8), as the rows
    of a 2-D array: one gather from a strided view of every window (faster than an index
    array of every byte). Each ``start + width`` must be within ``data``."""
    return _windows(data, width)[starts]


def write_rows(data: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> None:
    """Write the rows of ``rows`` (uint8, 2-D) into ``data`` (writable) at ``starts``
    (which must not make two rows overlap)."""
    _windows(data, rows.shape[1])[starts] = rows
