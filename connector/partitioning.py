"""Splitting queue ranges over Spark partitions: ``minPartitions`` and
``maxMessagesPerPartition`` (Kafka's ``minPartitions`` / ``maxRecordsPerPartition``).

By default a read has one partition per queue with work. ``maxMessagesPerPartition = M``
cuts every range of more than M offsets into ``ceil(size / M)`` pieces;
``minPartitions = N`` then, while there are fewer than N pieces, gives every range a
share of N in proportion to its size (largest remainders first, at least one each,
never more pieces than offsets), so a read of at least N messages has at least N
partitions. Pieces of one range are consecutive and of nearly equal size (sizes differ
by at most one), so every offset is read exactly once. Sizes are offset counts: with a
broker-side filter a piece may hold fewer rows than offsets. Pure and deterministic.

>>> split_counts([100, 10], min_partitions=5, max_per_partition=None)
[5, 1]
>>> piece_bounds(0, 10, 3)
[(0, 4), (4, 7), (7, 10)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, TypeVar

from connector.offsets import split_budget
from connector.options import ReadOptions


class _Range(Protocol):
    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


R = TypeVar("R", bound=_Range)


def split_counts(
    sizes: Sequence[int], *, min_partitions: int | None, max_per_partition: int | None
) -> list[int]:
    """How many pieces each range of ``sizes`` offsets is cut into (1 for an empty one)."""
    counts = [max(1, -(-size // max_per_partition)) if max_per_partition else 1 for size in sizes]
    reading = sum(count for count, size in zip(counts, sizes, strict=True) if size > 0)
    if min_partitions is None or reading >= min_partitions:  # an empty range reads nothing
        return counts
    shares = split_budget(dict(enumerate(sizes)), min_partitions)
    return [
        max(count, min(size, max(1, shares[i])))
        for i, (count, size) in enumerate(zip(counts, sizes, strict=True))
    ]


def piece_bounds(start: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into ``pieces`` consecutive non-empty parts (the first ones
    one longer when the size does not divide)."""
    size = end - start
    pieces = max(1, min(pieces, size))
    base, extra = divmod(size, pieces)
    out, at = [], start
    for i in range(pieces):
        step = base + (1 if i < extra else 0)
        out.append((at, at + step))
        at += step
    return out


def split_ranges(ranges: Sequence[R], options: ReadOptions) -> list[R]:
    """``ranges`` cut as ``options.min_partitions`` / ``max_messages_per_partition`` ask
    (``ranges`` are frozen dataclasses with ``start`` / ``end``), in the given order."""
    counts = split_counts(
        [r.end - r.start for r in ranges],
        min_partitions=options.min_partitions,
        max_per_partition=options.max_messages_per_partition,
    )
    out: list[R] = []
    for r, count in zip(ranges, counts, strict=True):
        if count == 1:
            out.append(r)
            continue
        for low, high in piece_bounds(r.start, r.end, count):
            out.append(dataclasses.replace(r, start=low, end=high))  # type: ignore[type-var]
    return out
