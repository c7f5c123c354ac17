"""Tests for FIFO queue selection by message group."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.broker.order import message_group_hash, queue_for_message_group
from broker_core.errors import InvalidArgumentError

FAST = settings(max_examples=200, deadline=None)


@pytest.mark.parametrize(
    ("group", "count", "expected"),
    [
        ("order-1", 8, 5),
        ("order-1", 16, 13),
        ("order-1", 3, 2),
        ("order-2", 8, 3),
        ("user-42", 8, 6),
        ("订单-7", 16, 13),
        ("a", 16, 15),
        ("anything", 1, 0),
    ],
)
def test_fixed_values_pin_the_hash(group: str, count: int, expected: int) -> None:
    """Changing these values would reorder every FIFO group after an upgrade."""
    assert queue_for_message_group(group, count) == expected


def test_hash_is_not_builtin_hash() -> None:
    assert message_group_hash("order-1") == 2709196713320186429


@pytest.mark.parametrize("count", [0, -1, True, 2.0, "4"])
def test_rejects_bad_queue_count(count: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="queue_count"):
        queue_for_message_group("g", count)


@pytest.mark.parametrize("group", ["", None, b"g"])
def test_rejects_bad_group(group: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="message_group"):
        queue_for_message_group(group, 4)


@FAST
@given(group=st.text(min_size=1), count=st.integers(1, 1024))
def test_in_range_and_stable(group: str, count: int) -> None:
    queue = queue_for_message_group(group, count)
    assert 0 <= queue < count
    assert queue_for_message_group(group, count) == queue


def test_spreads_groups_over_queues() -> None:
    counts = Counter(queue_for_message_group(f"order-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8))
    assert all(800 <= c <= 1200 for c in counts.values())
