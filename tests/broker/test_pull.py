"""Offset pulls over a real store: ranges, tag and SQL92 filters, offset statuses."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.pull import (
    PullRequest,
    PullService,
    PullStatus,
    classify_offset,
    status_of_read,
    store_filters,
)
from broker_core.errors import InvalidArgumentError, InvalidOffsetError, OffsetOutOfRangeError
from broker_core.message import Message, tag_hash
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore
from tests.store.conftest import make_message, small_config

Open = Callable[..., MessageStore]


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Open]:
    opened: list[MessageStore] = []

    def _open(**overrides: Any) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **overrides))
        store.open()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Open) -> MessageStore:
    return open_store()


def put(store: MessageStore, messages: list[Message]) -> None:
    store.put_messages(messages)
    assert store.wait_dispatched()


def tagged(tag: str | None, topic: str = "t", **props: str) -> Message:
    properties = dict(props)
    if tag is not None:
        properties["TAGS"] = tag
    return Message(topic, f"{tag}:{props}".encode(), properties=properties)


# ---- pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "lo", "hi", "status", "next_offset"),
    [
        (0, 0, 0, PullStatus.NO_NEW_MESSAGE, 0),  # empty or unknown queue
        (3, 0, 0, PullStatus.OFFSET_OVERFLOW_BADLY, 0),
        (0, 0, 10, None, 0),
        (9, 0, 10, None, 9),
        (10, 0, 10, PullStatus.NO_NEW_MESSAGE, 10),
        (11, 0, 10, PullStatus.OFFSET_OVERFLOW_BADLY, 10),
        (4, 5, 10, PullStatus.OFFSET_TOO_SMALL, 5),
        (0, 5, 10, PullStatus.OFFSET_TOO_SMALL, 5),
        (5, 5, 10, None, 5),
        (20, 5, 10, PullStatus.OFFSET_OVERFLOW_BADLY, 10),
        (3, 10, 10, PullStatus.OFFSET_TOO_SMALL, 10),  # everything was removed
        (10, 10, 10, PullStatus.NO_NEW_MESSAGE, 10),
    ],
)
def test_classify_offset(
    offset: int, lo: int, hi: int, status: PullStatus | None, next_offset: int
) -> None:
    assert classify_offset(offset, lo, hi) == (status, next_offset)


@pytest.mark.parametrize(
    ("found", "scanned", "status"),
    [
        (1, 1, PullStatus.FOUND),
        (2, 9, PullStatus.FOUND),
        (0, 5, PullStatus.NO_MATCHED_MESSAGE),
        (0, 0, PullStatus.NO_NEW_MESSAGE),
    ],
)
def test_status_of_read(found: int, scanned: int, status: PullStatus) -> None:
    assert status_of_read(found, scanned) is status


@pytest.mark.parametrize(
    ("status", "illegal", "empty"),
    [
        (PullStatus.FOUND, False, False),
        (PullStatus.NO_NEW_MESSAGE, False, True),
        (PullStatus.NO_MATCHED_MESSAGE, False, True),
        (PullStatus.OFFSET_TOO_SMALL, True, False),
        (PullStatus.OFFSET_OVERFLOW_BADLY, True, False),
    ],
)
def test_status_flags(status: PullStatus, illegal: bool, empty: bool) -> None:
    assert (status.offset_illegal, status.empty) == (illegal, empty)


def test_store_filters_stages() -> None:
    assert store_filters(None) == (None, None)
    assert store_filters(MessageFilter("TAG", "*")) == (None, None)
    tag_stage, confirm = store_filters(MessageFilter("TAG", "A || B"))
    assert tag_stage is not None and confirm is not None
    assert tag_stage(tag_hash("A")) and not tag_stage(tag_hash("C")) and not tag_stage(0)
    sql_tag_stage, sql_confirm = store_filters(MessageFilter("SQL92", "a > 1"))
    assert sql_tag_stage is None and sql_confirm is not None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (dict(offset=-1), InvalidOffsetError),
        (dict(max_count=0), InvalidArgumentError),
        (dict(max_bytes=0), InvalidArgumentError),
        (dict(queue_id=-1), InvalidArgumentError),
    ],
)
def test_malformed_requests_raise(kwargs: dict[str, int], error: type[Exception]) -> None:
    values: dict[str, Any] = dict(topic="t", queue_id=0, offset=0, max_count=1, max_bytes=1)
    values.update(kwargs)
    with pytest.raises(error) as info:
        PullRequest(**values)
    assert error is InvalidOffsetError or not isinstance(info.value, InvalidOffsetError)


# ---- against a real store -------------------------------------------------------------------


def test_pull_ranges(store: MessageStore) -> None:
    put(store, [make_message(i) for i in range(10)])
    pull = PullService(store)
    first = pull.execute(PullRequest("orders", 0, 0, 4))
    assert first.status is PullStatus.FOUND
    assert [m.queue_offset for m in first.messages] == [0, 1, 2, 3]
    assert (first.next_offset, first.min_offset, first.max_offset) == (4, 0, 10)
    rest = pull.execute(PullRequest("orders", 0, first.next_offset, 100))
    assert [m.properties["n"] for m in rest.messages] == [str(i) for i in range(4, 10)]
    assert rest.next_offset == 10 and rest.error is None and rest.problem == ""
    end = pull.execute(PullRequest("orders", 0, 10, 100))
    assert end.status is PullStatus.NO_NEW_MESSAGE
    assert (end.next_offset, end.messages) == (10, [])


def test_pull_respects_max_bytes_but_always_returns_one(store: MessageStore) -> None:
    put(store, [make_message(i, size=1000) for i in range(5)])
    result = PullService(store).execute(PullRequest("orders", 0, 0, 100, max_bytes=10))
    assert [m.queue_offset for m in result.messages] == [0] and result.next_offset == 1
    two = PullService(store).execute(PullRequest("orders", 0, 0, 100, max_bytes=2500))
    assert len(two.messages) == 2


def test_queues_are_separate(store: MessageStore) -> None:
    put(store, [make_message(i, queue_id=i % 3) for i in range(9)])
    result = PullService(store).execute(PullRequest("orders", 2, 0, 100))
    assert [m.properties["n"] for m in result.messages] == ["2", "5", "8"]
    assert (
        PullService(store).execute(PullRequest("other", 0, 0, 10)).status
        is PullStatus.NO_NEW_MESSAGE
    )


def test_tag_filter(store: MessageStore) -> None:
    tags = ["TagA", "TagB", "TagC", None, "TagA", "taga", "TagB || TagA", "TagC"]
    put(store, [tagged(t) for t in tags])
    result = PullService(store).execute(
        PullRequest("t", 0, 0, 100, filter=MessageFilter("TAG", "TagA || TagB"))
    )
    assert result.status is PullStatus.FOUND
    assert [m.tag for m in result.messages] == ["TagA", "TagB", "TagA"]
    assert [m.queue_offset for m in result.messages] == [0, 1, 4]
    assert (result.next_offset, result.scanned, result.filtered) == (8, 8, 5)


def test_tag_filter_honours_max_count_and_resumes(store: MessageStore) -> None:
    put(store, [tagged("A" if i % 3 == 0 else "B") for i in range(30)])
    pull, only_a = PullService(store), MessageFilter("TAG", "A")
    offsets: list[int] = []
    offset = 0
    while (
        result := pull.execute(PullRequest("t", 0, offset, 4, filter=only_a))
    ).status is PullStatus.FOUND:
        offsets += [m.queue_offset for m in result.messages]
        offset = result.next_offset
    assert offsets == list(range(0, 30, 3))
    assert result.status in (PullStatus.NO_NEW_MESSAGE, PullStatus.NO_MATCHED_MESSAGE)


# Two tags with the same CRC32, hence the same consume-queue tag hash (found by a seeded
# birthday search over random tags; the test re-checks the collision).
COLLIDING_TAGS = ("tag-9c467b3b39d3", "tag-1efa1463b5ed")


def test_tag_hash_collision_is_confirmed_on_the_real_tag(store: MessageStore) -> None:
    wanted, twin = COLLIDING_TAGS
    assert tag_hash(wanted) == tag_hash(twin) and wanted != twin
    put(store, [tagged(twin), tagged(wanted), tagged(twin)])
    result = PullService(store).execute(
        PullRequest("t", 0, 0, 10, filter=MessageFilter("TAG", wanted))
    )
    assert [m.tag for m in result.messages] == [wanted]
    assert result.filtered == 2


def test_sql92_filter(store: MessageStore) -> None:
    cases = [(a, b) for a in (0, 5, 6, 9) for b in ("x", "y")]
    put(store, [tagged("T", a=str(a), b=b) for a, b in cases] + [tagged("T", b="x")])
    sql = MessageFilter("SQL92", "a > 5 AND b = 'x'")
    result = PullService(store).execute(PullRequest("t", 0, 0, 100, filter=sql))
    assert [(m.properties["a"], m.properties["b"]) for m in result.messages] == [
        ("6", "x"),
        ("9", "x"),
    ]
    assert result.next_offset == len(cases) + 1


def test_sql92_sees_the_tag(store: MessageStore) -> None:
    put(store, [tagged("A", a="1"), tagged("B", a="1")])
    result = PullService(store).execute(
        PullRequest("t", 0, 0, 10, filter=MessageFilter("SQL92", "TAGS = 'B'"))
    )
    assert [m.tag for m in result.messages] == ["B"]


def test_no_matched_message(store: MessageStore) -> None:
    put(store, [tagged("TagC") for _ in range(6)])
    result = PullService(store).execute(
        PullRequest("t", 0, 2, 10, filter=MessageFilter("TAG", "TagA"))
    )
    assert result.status is PullStatus.NO_MATCHED_MESSAGE
    assert (result.messages, result.next_offset, result.max_offset) == ([], 6, 6)
    assert (result.scanned, result.filtered) == (4, 4)


def test_offset_overflow_badly(store: MessageStore) -> None:
    put(store, [make_message(i) for i in range(5)])
    result = PullService(store).execute(PullRequest("orders", 0, 42, 10))
    assert result.status is PullStatus.OFFSET_OVERFLOW_BADLY and result.status.offset_illegal
    assert (result.next_offset, result.min_offset, result.max_offset) == (5, 0, 5)
    assert isinstance(result.error, OffsetOutOfRangeError)
    assert "offset out of range (min is 0, max is 5): orders:0 offset 42" in result.problem


def test_offset_overflow_on_an_unknown_queue_goes_back_to_zero(store: MessageStore) -> None:
    result = PullService(store).execute(PullRequest("nobody", 3, 7, 10))
    assert result.status is PullStatus.OFFSET_OVERFLOW_BADLY
    assert (result.next_offset, result.min_offset, result.max_offset) == (0, 0, 0)


def test_offset_too_small_after_retention(open_store: Open) -> None:
    store = open_store(file_reserved_hours=1, consume_queue_units_per_file=16)
    for start in range(0, 300, 50):
        put(store, [make_message(i, size=700) for i in range(start, start + 50)])
    store.commitlog.flush()
    old = time.time() - 2 * 3600
    for seg in store.commitlog.segments()[:-1]:
        os.utime(seg.path, (old, old))
    assert store.run_cleanup().deleted_segments
    low = store.min_offset("orders", 0)
    assert low > 0
    pull = PullService(store)
    result = pull.execute(PullRequest("orders", 0, 0, 10))
    assert result.status is PullStatus.OFFSET_TOO_SMALL and result.status.offset_illegal
    assert (result.next_offset, result.min_offset, result.max_offset) == (low, low, 300)
    assert f"min is {low}" in result.problem and result.messages == []
    resumed = pull.execute(PullRequest("orders", 0, result.next_offset, 10))
    assert resumed.status is PullStatus.FOUND and resumed.messages[0].queue_offset == low


def test_pull_after_restart(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    store.open()
    try:
        put(store, [tagged("A" if i % 2 else "B") for i in range(10)])
    finally:
        store.close()
    store = MessageStore(config)
    store.open()
    try:
        result = PullService(store).execute(
            PullRequest("t", 0, 3, 100, filter=MessageFilter("TAG", "A"))
        )
        assert [m.queue_offset for m in result.messages] == [3, 5, 7, 9]
        assert result.next_offset == 10
    finally:
        store.close()


@pytest.mark.parametrize(
    ("budget_units", "kept"), [(0.0, 1), (1.0, 1), (2.5, 2), (3.0, 3), (99, 5)]
)
def test_byte_budget_trims_and_next_pull_resumes(
    store: MessageStore, budget_units: float, kept: int
) -> None:
    put(store, [make_message(0, size=1000) for _ in range(5)])  # all the same size
    pull = PullService(store)
    unit_bytes = pull.execute(PullRequest("orders", 0, 0, 1)).messages[0].stored_size
    max_bytes = max(1, int(unit_bytes * budget_units))
    result = pull.execute(PullRequest("orders", 0, 0, 100, max_bytes=max_bytes))
    assert [m.queue_offset for m in result.messages] == list(range(kept))
    assert result.next_offset == kept and result.scanned == kept
    rest = pull.execute(PullRequest("orders", 0, result.next_offset, 100))
    assert [m.queue_offset for m in rest.messages] == list(range(kept, 5))


def test_byte_budget_with_a_filter_counts_scanned_units(store: MessageStore) -> None:
    put(store, [tagged("A" if i % 2 else "B") for i in range(10)])  # A at odd offsets
    one = PullService(store).execute(
        PullRequest("t", 0, 0, 100, max_bytes=1, filter=MessageFilter("TAG", "A"))
    )
    assert [m.queue_offset for m in one.messages] == [1]
    assert (one.next_offset, one.scanned, one.filtered) == (2, 2, 1)
