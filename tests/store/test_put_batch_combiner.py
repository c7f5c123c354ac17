"""Sync-mode ``put_batch`` combining: concurrent single sends share one lead and one sync,
and every caller gets its own answer — its offsets, or an error when the shared fdatasync
fails.

The failing fdatasync is injected at the store's boundary: ``os.fdatasync`` is replaced
for the commitlog's files only (found by the descriptor's path), and raises EIO as a
failing disk would; every other file syncs for real.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from broker_core.errors import StoreError
from broker_core.store.columns import encode_messages
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import UNIT_LIMITS, make_message

Open = Callable[..., MessageStore]


class CommitlogSyncs:
    """The commitlog's fdatasyncs, numbered: ``hold`` one until ``go`` is set, ``fail`` some."""

    def __init__(self) -> None:
        self.count = 0
        self.hold = 0  # this call (1-based) waits for ``go``
        self.go = threading.Event()
        self.fail_from = 0  # this call and later ones raise EIO (0: none)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[CommitlogSyncs]:
    real, state = os.fdatasync, CommitlogSyncs()

    def fdatasync(fd: int) -> None:
        if "commitlog" not in os.readlink(f"/proc/self/fd/{fd}"):
            return real(fd)
        state.count += 1
        if state.count == state.hold:
            state.go.wait(10)
        if state.fail_from and state.count >= state.fail_from:
            raise OSError(errno.EIO, "injected I/O error")
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield state
    state.go.set()


class Sender(threading.Thread):
    """One single-message ``put_batch`` (what a SendMessage stores) on its own thread."""

    def __init__(self, store: MessageStore, n: int) -> None:
        super().__init__(daemon=True)  # a hung call must not hang the test run
        self.store, self.batch = store, encode_messages([make_message(n)], **UNIT_LIMITS)
        self.error: BaseException | None = None
        self.queue_offset = -1
        self.start()

    def run(self) -> None:
        try:
            self.store.put_batch(self.batch)
            self.queue_offset = int(self.batch.queue_offsets[0])
        except BaseException as exc:
            self.error = exc


def wait_until(done: Callable[[], bool], what: str) -> None:
    """Await a state the store reaches on another thread (not a timing assertion)."""
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def test_concurrent_single_puts_share_leads_and_syncs(open_store: Open) -> None:
    store = open_store(flush_mode="sync", segment_size_bytes=1 << 20)
    assert store._batches is not None
    threads, per_thread = 16, 10
    barrier = threading.Barrier(threads)
    offsets: list[int] = []

    def sender(t: int) -> None:
        barrier.wait()
        for c in range(per_thread):
            batch = encode_messages([make_message(t * per_thread + c)], **UNIT_LIMITS)
            store.put_batch(batch)
            end = int(batch.physical_offsets[0]) + int(batch.sizes[0])
            assert store.commitlog.flushed_offset >= end  # durable when answered
            offsets.append(int(batch.queue_offsets[0]))

    workers = [threading.Thread(target=sender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = threads * per_thread
    assert sorted(offsets) == list(range(total))  # each caller its own queue offset
    assert store._batches.calls == total
    assert store._batches.batches < total  # some calls were stored together
    store.wait_dispatched()
    stored = store.get_messages(QueueRead("orders", 0, 0, total + 1)).messages
    assert {m.properties["UNIQ_KEY"] for m in stored} == {f"ID{i:010d}" for i in range(total)}


def test_a_combined_put_whose_fsync_fails_answers_every_caller_with_an_error(
    open_store: Open, syncs: CommitlogSyncs
) -> None:
    store = open_store(flush_mode="sync")
    assert store._batches is not None
    syncs.hold, syncs.fail_from = 1, 2  # the first sync waits, the second fails
    first = Sender(store, 0)
    wait_until(lambda: syncs.count == 1, "the first put's fdatasync did not start")
    followers = []
    for n in (1, 2, 3):
        followers.append(Sender(store, n))
        wait_until(lambda n=n: store._batches.queued == n, f"{n} puts not queued")  # type: ignore[union-attr]
    syncs.go.set()  # the first sync completes; the three queued puts go as one batch
    for sender in (first, *followers):
        sender.join(10)
        assert not sender.is_alive()
    assert first.error is None and first.queue_offset == 0
    assert (store._batches.batches, store._batches.calls) == (2, 4)
    assert syncs.count >= 2  # the combined batch's own fdatasync ran, and failed
    for sender in followers:
        assert isinstance(sender.error, StoreError), sender.error
        assert "injected I/O error" in str(sender.error)
    with pytest.raises(StoreError, match="store is failing"):
        store.put_batch(encode_messages([make_message(9)], **UNIT_LIMITS))


def test_each_combined_put_keeps_its_place(open_store: Open, syncs: CommitlogSyncs) -> None:
    """Queued puts are stored in the order they queued, side by side."""
    store = open_store(flush_mode="sync")
    assert store._batches is not None
    syncs.hold = 1
    first = Sender(store, 0)
    wait_until(lambda: syncs.count == 1, "the first put's fdatasync did not start")
    followers = []
    for n in range(1, 6):
        followers.append(Sender(store, n))
        wait_until(lambda n=n: store._batches.queued == n, f"{n} puts not queued")  # type: ignore[union-attr]
    syncs.go.set()
    for sender in (first, *followers):
        sender.join(10)
        assert sender.error is None
    assert [s.queue_offset for s in (first, *followers)] == list(range(6))
    ends = [int(s.batch.physical_offsets[0]) for s in (first, *followers)]
    sizes = [int(s.batch.sizes[0]) for s in (first, *followers)]
    assert all(a + size == b for (a, b), size in zip(itertools.pairwise(ends), sizes, strict=False))
