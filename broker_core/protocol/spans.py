"""Gathering byte spans of a buffer in bulk: the copy under raw reads and column decoding.

>>> import numpy as np
>>> buf = np.frombuffer(b"abcdefgh", np.uint8)
>>> gather_spans(buf, np.array([1, 5]), np.array([2, 3]))
b'bcfgh'
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def gather_spans(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The bytes of the spans ``[starts[i], starts[i] + lengths[i])`` of ``buf``, in order.

    The spans must be disjoint and ascending. When they are about the same length (units
    of similar messages, topics) a ``(count, widest)`` block of rows is copied through a
    sliding-window view and the bytes past each length dropped; otherwise one
    ``np.repeat`` builds the mask of the bytes they cover. Either way the cost is per
    byte, not per span.
    """
    n = len(starts)
    if n == 0:
        return b""
    width = int(lengths.max())
    if (
        width > 0
        and width * n <= 2 * int(lengths.sum()) + 64
        and int(starts.max()) <= len(buf) - width
    ):
        rows = sliding_window_view(buf, width)[starts]
        if bool((lengths == width).all()):
            return rows.tobytes()
        return bytes(rows[np.arange(width) < lengths[:, None]].tobytes())
    ends = starts + lengths
    runs = np.empty(2 * n + 1, np.int64)
    runs[0] = starts[0]
    runs[1::2] = lengths
    runs[2:-1:2] = starts[1:] - ends[:-1]
    runs[-1] = len(buf) - ends[-1]
    pattern = np.zeros(2 * n + 1, np.bool_)
    pattern[1::2] = True
    return bytes(buf[np.repeat(pattern, runs)].tobytes())
