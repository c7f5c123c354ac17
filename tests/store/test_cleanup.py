"""Retention: expired segments go, queues and index follow, reads below the minimum fail."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from broker_core.errors import OffsetOutOfRangeError
from broker_core.store.cleanup import CleanupService
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message

Open = Callable[..., MessageStore]
HOUR_MS = 3_600_000


def fill(store: MessageStore, count: int) -> None:
    for start in range(0, count, 50):
        store.put_messages(
            [
                make_message(i, queue_id=i % 2, size=700)
                for i in range(start, min(count, start + 50))
            ]
        )
    assert store.wait_dispatched()
    store.commitlog.flush()


def age(store: MessageStore, hours: float, keep_last: int = 1) -> None:
    old = time.time() - hours * 3600
    segments = store.commitlog.segments()
    for seg in segments[: len(segments) - keep_last]:
        os.utime(seg.path, (old, old))


def test_expired_segments_are_deleted_and_reads_below_min_fail(open_store: Open) -> None:
    store = open_store(file_reserved_hours=1, consume_queue_units_per_file=16)
    fill(store, 400)
    segments_before = len(store.commitlog.segments())
    assert segments_before >= 4
    age(store, hours=2, keep_last=2)
    report = store.run_cleanup()
    assert len(report.deleted_segments) == segments_before - 2
    assert report.deleted_queue_files > 0
    assert store.commitlog.min_offset == store.commitlog.segments()[0].base_offset
    low = store.min_offset("orders", 0)
    assert low > 0
    with pytest.raises(OffsetOutOfRangeError, match=rf"offset out of range \(min is {low}"):
        store.get_messages(QueueRead("orders", 0, 0, 10))
    got = store.get_messages(QueueRead("orders", 0, low, 1000))
    assert got.messages[0].queue_offset == low and got.next_offset == 200
    assert got.messages[0].physical_offset >= store.commitlog.min_offset
    assert store.query_by_key("key-0") == []  # its bytes are gone; never served
    assert store.query_by_key("key-399")[0].properties["n"] == "399"


def test_fresh_segments_are_kept(open_store: Open) -> None:
    store = open_store(file_reserved_hours=1)
    fill(store, 300)
    assert store.run_cleanup().deleted_segments == []


def test_active_and_undispatched_segments_are_never_deleted(open_store: Open) -> None:
    store = open_store(file_reserved_hours=1)
    fill(store, 300)
    age(store, hours=5, keep_last=0)
    store.run_cleanup()
    assert len(store.commitlog.segments()) == 1  # only the active one is left


def test_disk_pressure_deletes_oldest_first_until_below_the_ratio(open_store: Open) -> None:
    store = open_store(file_reserved_hours=1000)
    fill(store, 300)
    segments = store.commitlog.segments()
    ratios = iter([0.95, 0.95, 0.5])  # full, still full after one deletion, then fine
    service = CleanupService(
        store.commitlog,
        store.queues,
        store.index,
        file_reserved_hours=1000,
        disk_max_used_ratio=0.9,
        safe_offset=lambda: store.commitlog.flushed_offset,
        disk_ratio=lambda: next(ratios),
    )
    report = service.run_once(int(time.time() * 1000))
    assert report.deleted_segments == [segments[0].path.name, segments[1].path.name]


def test_retention_survives_restart(open_store: Open) -> None:
    store = open_store(file_reserved_hours=1)
    fill(store, 400)
    age(store, hours=2, keep_last=2)
    store.run_cleanup()
    low = store.min_offset("orders", 1)
    store.close()
    store = open_store(file_reserved_hours=1)
    assert store.min_offset("orders", 1) == low
    assert store.get_messages(QueueRead("orders", 1, low, 1)).messages[0].queue_offset == low
