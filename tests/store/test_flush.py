"""Flush: sync appends return durable, concurrent sync appends share fdatasyncs."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable

import pytest

from broker_core.errors import FlushTimeoutError, StoreError
from broker_core.message import Message
from broker_core.store.columns import encode_messages
from broker_core.store.flush import Checkpoint
from broker_core.store.message_store import MessageStore
from tests.store.conftest import UNIT_LIMITS, make_message

Open = Callable[..., MessageStore]


def test_sync_append_returns_only_when_durable(open_store: Open) -> None:
    store = open_store(flush_mode="sync")
    for i in range(20):
        result = store.put_message(make_message(i))
        assert store.commitlog.flushed_offset >= result.physical_offset + result.size


def test_a_sync_append_does_not_wait_for_the_flush_interval(open_store: Open) -> None:
    """The interval is only the flush thread's safety net in sync mode: an append is
    covered as soon as it registers, also the very first one."""
    store = open_store(flush_mode="sync", flush_interval_ms=600_000, sync_flush_timeout_ms=3_000)
    for i in range(3):
        r = store.put_message(make_message(i))
        assert store.commitlog.flushed_offset >= r.physical_offset + r.size


def test_concurrent_sync_appends_share_one_fdatasync(open_store: Open) -> None:
    store = open_store(flush_mode="sync", flush_interval_ms=1000)
    threads, per_thread = 32, 10
    barrier = threading.Barrier(threads)
    ends: list[int] = []

    def appender(t: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            r = store.put_message(make_message(t * 1000 + i))
            ends.append(r.physical_offset + r.size)

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(ends) == threads * per_thread
    assert store.commitlog.flushed_offset >= max(ends)
    assert store.flusher.flush_count < threads * per_thread  # group commit happened


def put_one_message(store: MessageStore, message: Message) -> int:
    """``put_message`` (sync calls combined: ``put_combiner``); the end of its unit."""
    result = store.put_message(message)
    return result.physical_offset + result.size


def put_one_batch(store: MessageStore, message: Message) -> int:
    """``put_batch`` of one encoded message (what SendMessage does): the flusher's group
    commit alone shares the fdatasyncs. The end of its unit."""
    batch = encode_messages([message], **UNIT_LIMITS)
    store.put_batch(batch)
    return int(batch.physical_offsets[0] + batch.sizes[0])


@pytest.mark.parametrize("put", [put_one_message, put_one_batch])
def test_group_commit_one_fdatasync_covers_many_appenders(
    open_store: Open, monkeypatch: pytest.MonkeyPatch, put: Callable[[MessageStore, Message], int]
) -> None:
    """64 concurrent sync appenders: every append returns only after an fdatasync that
    started once its bytes were written, and fdatasyncs are shared (fewer than one per 4
    messages on any load; the goal of one per 16 is measured by ``bench store-append``,
    whose ``sync_fdatasyncs`` a loaded machine cannot make flaky here)."""
    store = open_store(
        flush_mode="sync", segment_size_bytes=8 << 20, derived_flush_interval_ms=600_000
    )
    real_fdatasync = os.fdatasync
    durable = [0]  # the log's end before the last completed fdatasync began
    syncs = [0]

    def counting_fdatasync(fd: int) -> None:
        written = store.commitlog.max_offset
        real_fdatasync(fd)
        syncs[0] += 1
        durable[0] = max(durable[0], written)

    monkeypatch.setattr(os, "fdatasync", counting_fdatasync)
    threads, per_thread = 64, 25
    barrier = threading.Barrier(threads)
    early: list[int] = []  # ends acknowledged before an fdatasync covered them

    def appender(t: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            end = put(store, make_message(t * 1000 + i, size=200))
            if end > durable[0]:
                early.append(end)

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert early == []
    assert store.commitlog.max_offset == durable[0]
    assert 0 < syncs[0] <= threads * per_thread // 4, f"{syncs[0]} fdatasyncs"


def test_sync_append_fails_loudly_when_fdatasync_fails(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(flush_mode="sync", flush_interval_ms=5)
    store.put_message(make_message(0))

    def broken_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    with pytest.raises(StoreError, match="flush failed"):
        store.put_message(make_message(1))
    with pytest.raises(StoreError, match="store is failing"):
        store.put_message(make_message(2))  # refused before anything is appended


def test_sync_append_times_out_then_the_next_flush_covers_it(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(flush_mode="sync", sync_flush_timeout_ms=100)
    real_fdatasync = os.fdatasync
    disk_back = threading.Event()

    def slow_fdatasync(fd: int) -> None:
        disk_back.wait(10)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    with pytest.raises(FlushTimeoutError):
        store.put_message(make_message(0))
    disk_back.set()
    result = store.put_message(make_message(1))  # the stuck flush ends; a new one covers this
    assert store.commitlog.flushed_offset >= result.physical_offset + result.size


def test_async_flush_catches_up_within_the_interval(open_store: Open) -> None:
    store = open_store(flush_mode="async", flush_interval_ms=10)
    result = store.put_message(make_message(1))
    deadline = time.monotonic() + 5
    while store.commitlog.flushed_offset < result.physical_offset + result.size:
        assert time.monotonic() < deadline, "async flush did not run"
        time.sleep(0.005)


def test_checkpoint_records_durable_and_dispatched_offsets(open_store: Open, tmp_path) -> None:
    store = open_store(derived_flush_interval_ms=600_000)  # no background checkpoint meanwhile
    store.put_messages([make_message(i, queue_id=i % 2) for i in range(10)])
    store.wait_dispatched()
    store.commitlog.flush()
    store.checkpoint()
    cp, problem = Checkpoint.load(tmp_path / "store" / "checkpoint")
    assert problem == "" and cp is not None
    assert cp.physical_flushed == cp.dispatched == store.commitlog.max_offset
    assert cp.queue_offsets == {"orders": {"0": [0, 5], "1": [0, 5]}}
