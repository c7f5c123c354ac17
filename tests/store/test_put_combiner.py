"""Sync-mode put combining: concurrent calls share an append, yet each is answered alone."""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from broker_core.errors import MessageTooLargeError, StoreError
from broker_core.message import Message
from broker_core.store.message_store import MessageStore, PutResult
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message

Open = Callable[..., MessageStore]


class HeldFlush:
    """fdatasync waits until ``release()``, then syncs, or fails if ``fail`` was set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.fail = False

    def release(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.gate.set()


@pytest.fixture
def held_flush(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldFlush]:
    real_fdatasync, held = os.fdatasync, HeldFlush()

    def gated_fdatasync(fd: int) -> None:
        held.gate.wait(10)
        if held.fail:
            raise OSError(errno.EIO, "injected I/O error")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", gated_fdatasync)
    yield held
    held.gate.set()


class Caller(threading.Thread):
    """One ``put_messages`` call on its own thread; keeps its results or its error."""

    def __init__(self, store: MessageStore, messages: list[Message]) -> None:
        super().__init__(daemon=True)  # a hung call must not hang the test run
        self.store, self.messages = store, messages
        self.results: list[PutResult] = []
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.results = self.store.put_messages(self.messages)
        except BaseException as exc:
            self.error = exc


def wait_queued(store: MessageStore, count: int) -> None:
    deadline = time.monotonic() + 10
    while store._combiner.queued < count:
        assert time.monotonic() < deadline, f"{store._combiner.queued} calls queued"
        time.sleep(0.001)


def queued_behind_a_held_leader(
    store: MessageStore, calls: list[list[Message]]
) -> tuple[Caller, list[Caller]]:
    """A leader that appended and waits for its (held) fdatasync, then ``calls`` queued
    behind it, in this order."""
    leader = Caller(store, [make_message(0)])
    deadline = time.monotonic() + 10
    while store.commitlog.max_offset == 0:
        assert time.monotonic() < deadline, "the leader did not append"
        time.sleep(0.001)
    followers = []
    for i, messages in enumerate(calls):
        followers.append(Caller(store, messages))
        wait_queued(store, i + 1)
    return leader, followers


def test_concurrent_sync_calls_share_appends_and_keep_their_order(open_store: Open) -> None:
    store = open_store(flush_mode="sync", segment_size_bytes=1 << 20)
    threads, per_thread, per_call = 16, 8, 3
    barrier = threading.Barrier(threads)
    answered: list[list[PutResult]] = []

    def caller(t: int) -> None:
        barrier.wait()
        for c in range(per_thread):
            first = (t * per_thread + c) * per_call
            answered.append(store.put_messages([make_message(first + k) for k in range(per_call)]))

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(answered) == threads * per_thread
    for results in answered:  # each call's messages lie side by side, in its order
        assert all(
            r.physical_offset + r.size == n.physical_offset for r, n in itertools.pairwise(results)
        )
        assert [r.queue_offset for r in results] == list(
            range(results[0].queue_offset, results[0].queue_offset + per_call)
        )
        assert store.commitlog.flushed_offset >= results[-1].physical_offset + results[-1].size
    assert store._combiner.calls == threads * per_thread
    assert store._combiner.batches < store._combiner.calls
    store.wait_dispatched()
    total = threads * per_thread * per_call
    stored = store.get_messages(QueueRead("orders", 0, 0, total + 1)).messages
    ids = {m.properties["UNIQ_KEY"] for m in stored}
    assert ids == {f"ID{i:010d}" for i in range(total)}


def test_a_bad_message_fails_only_its_own_call(open_store: Open, held_flush: HeldFlush) -> None:
    store = open_store(flush_mode="sync", max_body_bytes=1024)
    too_big = Message("orders", bytes(2048), queue_id=0)
    calls = [[make_message(1, size=10)], [make_message(2, size=10), too_big]]
    leader, (good1, bad, good2) = queued_behind_a_held_leader(
        store, [*calls, [make_message(3, size=10)]]
    )
    held_flush.release()
    for caller in (leader, good1, bad, good2):
        caller.join(10)
    assert isinstance(bad.error, MessageTooLargeError)
    assert leader.error is good1.error is good2.error is None
    assert [r.queue_offset for r in good1.results + good2.results] == [1, 2]
    assert store._combiner.batches == 2  # the leader's, then the three calls together
    store.wait_dispatched()
    stored = store.get_messages(QueueRead("orders", 0, 0, 10)).messages
    assert [m.properties["n"] for m in stored] == ["0", "1", "3"]  # nothing of the bad call


def test_a_failed_flush_fails_every_call_of_the_batch(
    open_store: Open, held_flush: HeldFlush
) -> None:
    store = open_store(flush_mode="sync")
    leader, followers = queued_behind_a_held_leader(store, [[make_message(i)] for i in (1, 2)])
    held_flush.release(fail=True)
    for caller in (leader, *followers):
        caller.join(10)
        assert isinstance(caller.error, StoreError), caller.error
    assert store._combiner.queued == 0
    with pytest.raises(StoreError, match="store is failing"):
        store.put_messages([make_message(3)])  # refused before anything is appended


def test_a_lone_call_leads_at_once(open_store: Open) -> None:
    store = open_store(flush_mode="sync", flush_interval_ms=600_000)
    for i in range(3):
        (result,) = store.put_messages([make_message(i)])
        assert store.commitlog.flushed_offset >= result.physical_offset + result.size
    assert (store._combiner.batches, store._combiner.calls) == (3, 3)


def test_a_put_from_a_dispatch_listener_does_not_wait_for_itself(open_store: Open) -> None:
    """The leader runs dispatch listeners while it stores; one that puts is not queued
    behind the batch its own thread is storing."""
    store = open_store(flush_mode="sync", sync_flush_timeout_ms=3_000)
    audits: list[PutResult] = []

    def audit(topic: str, queue_id: int, max_offset: int) -> None:
        if topic == "orders":
            audits.extend(store.put_messages([Message("audit", b"seen", queue_id=0)]))

    store.add_dispatch_listener(audit)
    caller = Caller(store, [make_message(1)])
    caller.join(10)
    assert not caller.is_alive() and caller.error is None
    assert [r.topic for r in audits] == ["audit"]
    assert store.commitlog.flushed_offset >= audits[0].physical_offset + audits[0].size


def test_a_batch_stops_at_its_byte_bound(open_store: Open, held_flush: HeldFlush) -> None:
    store = open_store(flush_mode="sync", segment_size_bytes=1 << 20)
    store._combiner._max_body_bytes = 2_000
    calls = [[make_message(i, size=900)] for i in range(1, 6)]
    leader, followers = queued_behind_a_held_leader(store, calls)
    held_flush.release()
    for caller in (leader, *followers):
        caller.join(10)
        assert caller.error is None
    # the leader alone, then the five calls of ~910 body bytes two by two
    assert (store._combiner.batches, store._combiner.calls) == (4, 6)
    assert [c.results[0].queue_offset for c in followers] == [1, 2, 3, 4, 5]
