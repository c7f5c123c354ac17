"""Flush: sync appends return durable, concurrent sync appends share fdatasyncs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from broker_core.store.flush import Checkpoint
from broker_core.store.message_store import MessageStore
from tests.store.conftest import make_message

Open = Callable[..., MessageStore]


def test_sync_append_returns_only_when_durable(open_store: Open) -> None:
    store = open_store(flush_mode="sync")
    for i in range(20):
        result = store.put_message(make_message(i))
        assert store.commitlog.flushed_offset >= result.physical_offset + result.size


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


def test_async_flush_catches_up_within_the_interval(open_store: Open) -> None:
    store = open_store(flush_mode="async", flush_interval_ms=10)
    result = store.put_message(make_message(1))
    deadline = time.monotonic() + 5
    while store.commitlog.flushed_offset < result.physical_offset + result.size:
        assert time.monotonic() < deadline, "async flush did not run"
        time.sleep(0.005)


def test_checkpoint_records_durable_and_dispatched_offsets(open_store: Open, tmp_path) -> None:
    store = open_store()
    store.put_messages([make_message(i, queue_id=i % 2) for i in range(10)])
    store.wait_dispatched()
    store.commitlog.flush()
    store.checkpoint()
    cp, problem = Checkpoint.load(tmp_path / "store" / "checkpoint")
    assert problem == "" and cp is not None
    assert cp.physical_flushed == cp.dispatched == store.commitlog.max_offset
    assert cp.queue_offsets == {"orders": {"0": [0, 5], "1": [0, 5]}}
