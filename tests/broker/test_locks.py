"""Queue locks for orderly consumers: exclusive per group, expiry takeover, unlock, release."""

from __future__ import annotations

import threading

import pytest

from broker_core.broker.locks import (
    LockEntry,
    LockOutcome,
    QueueLockManager,
    is_expired,
    lock_outcome,
)
from broker_core.broker.rebalance import MessageQueue
from broker_core.errors import ConfigError, InvalidArgumentError, InvalidGroupError

EXPIRY_MS = 60_000
Q = [MessageQueue("orders", "broker-a", i) for i in range(8)]


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 5_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def locks(clock: FakeClock) -> QueueLockManager:
    return QueueLockManager(expiry_ms=EXPIRY_MS, clock_ms=clock)


# ---- pure decision ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "client", "now_ms", "outcome"),
    [
        (None, "a", 0, LockOutcome.ACQUIRED),
        (LockEntry("a", 0), "a", 10, LockOutcome.REFRESHED),
        (LockEntry("a", 0), "a", 10_000, LockOutcome.REFRESHED),  # its own expired lock
        (LockEntry("a", 0), "b", 0, LockOutcome.DENIED),
        (LockEntry("a", 0), "b", 100, LockOutcome.DENIED),  # expiry is inclusive
        (LockEntry("a", 0), "b", 101, LockOutcome.TAKEN_OVER),
        (LockEntry("a", 50), "b", 101, LockOutcome.DENIED),
    ],
)
def test_lock_outcome(
    entry: LockEntry | None, client: str, now_ms: int, outcome: LockOutcome
) -> None:
    assert lock_outcome(entry, client, now_ms, expiry_ms=100) is outcome
    assert outcome.granted is (outcome is not LockOutcome.DENIED)


@pytest.mark.parametrize(
    ("last_ms", "now_ms", "expired"),
    [(0, 0, False), (0, 100, False), (0, 101, True), (500, 400, False)],
)
def test_is_expired(last_ms: int, now_ms: int, expired: bool) -> None:
    assert is_expired(LockEntry("a", last_ms), now_ms, expiry_ms=100) is expired


# ---- the manager ---------------------------------------------------------------------------------


def test_lock_is_exclusive_per_queue_within_a_group(locks: QueueLockManager) -> None:
    assert locks.lock("g", "c1", Q[:4]) == set(Q[:4])
    assert locks.lock("g", "c2", Q[2:6]) == set(Q[4:6])
    assert locks.is_locked_by("g", Q[2], "c1") and not locks.is_locked_by("g", Q[2], "c2")
    assert locks.holder("g", Q[5]) == "c2" and locks.holder("g", Q[7]) is None
    assert locks.locked_queues("g", "c1") == set(Q[:4])
    assert locks.locked_queues("g", "c2") == set(Q[4:6])


def test_relocking_own_queues_refreshes_them(locks: QueueLockManager, clock: FakeClock) -> None:
    locks.lock("g", "c1", Q[:2])
    clock.now_ms += EXPIRY_MS - 1
    assert locks.lock("g", "c1", Q[:2]) == set(Q[:2])  # refreshed ...
    clock.now_ms += EXPIRY_MS - 1
    assert locks.lock("g", "c2", Q[:2]) == set()  # ... so still held
    assert locks.is_locked_by("g", Q[0], "c1")


def test_groups_are_independent(locks: QueueLockManager) -> None:
    assert locks.lock("g1", "c1", Q[:2]) == set(Q[:2])
    assert locks.lock("g2", "c2", Q[:2]) == set(Q[:2])
    assert locks.is_locked_by("g1", Q[0], "c1") and locks.is_locked_by("g2", Q[0], "c2")
    assert not locks.is_locked_by("g2", Q[0], "c1")
    locks.release_client("g1", "c1")
    assert locks.is_locked_by("g2", Q[0], "c2")


def test_expired_lock_is_taken_over(locks: QueueLockManager, clock: FakeClock) -> None:
    locks.lock("g", "c1", Q[:3])
    clock.now_ms += EXPIRY_MS
    assert locks.lock("g", "c2", Q[:3]) == set()  # exactly at the expiry: still c1's
    clock.now_ms += 1
    assert not locks.is_locked_by("g", Q[0], "c1") and locks.holder("g", Q[0]) is None
    assert locks.lock("g", "c2", Q[:1]) == {Q[0]}
    assert locks.is_locked_by("g", Q[0], "c2")
    assert locks.lock("g", "c1", Q[:3]) == set(Q[1:3])  # c1 comes back: keeps what is free
    assert locks.unlock("g", "c1", Q[:1]) == set()  # a stale unlock cannot free c2's lock
    assert locks.is_locked_by("g", Q[0], "c2")


def test_unlock_releases_only_own_queues(locks: QueueLockManager) -> None:
    locks.lock("g", "c1", Q[:2])
    locks.lock("g", "c2", Q[2:4])
    assert locks.unlock("g", "c1", Q[:4]) == set(Q[:2])
    assert locks.holder("g", Q[0]) is None and locks.holder("g", Q[2]) == "c2"
    assert locks.lock("g", "c2", Q[:2]) == set(Q[:2])
    assert locks.unlock("g", "c1", []) == set() and locks.unlock("other", "c1", Q) == set()


def test_release_client(locks: QueueLockManager) -> None:
    locks.lock("g", "c1", Q[:3])
    locks.lock("g", "c2", Q[3:5])
    assert locks.release_client("g", "c1") == set(Q[:3])
    assert locks.locked_queues("g", "c1") == set() and locks.locked_queues("g", "c2") == set(Q[3:5])
    assert locks.lock("g", "c3", Q[:5]) == set(Q[:3])
    assert locks.release_client("g", "nobody") == set()


def test_purge_expired(locks: QueueLockManager, clock: FakeClock) -> None:
    locks.lock("g", "c1", Q[:3])
    clock.now_ms += EXPIRY_MS // 2
    locks.lock("g2", "c2", Q[:1])
    clock.now_ms += EXPIRY_MS // 2 + 1
    assert locks.purge_expired() == 3
    assert locks.is_locked_by("g2", Q[0], "c2") and locks.purge_expired() == 0


def test_duplicate_queues_in_one_request(locks: QueueLockManager) -> None:
    assert locks.lock("g", "c1", [Q[0], Q[0], Q[1]]) == {Q[0], Q[1]}


@pytest.mark.parametrize(
    ("group", "client", "error"),
    [
        ("", "c", InvalidGroupError),
        ("bad group", "c", InvalidGroupError),
        ("g", "", InvalidArgumentError),
    ],
)
def test_bad_names_are_rejected(
    locks: QueueLockManager, group: str, client: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        locks.lock(group, client, Q[:1])
    with pytest.raises(error):
        locks.unlock(group, client, Q[:1])


def test_expiry_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        QueueLockManager(expiry_ms=0)


def test_concurrent_lockers_never_share_a_queue() -> None:
    locks = QueueLockManager(expiry_ms=EXPIRY_MS)
    won: dict[str, set[MessageQueue]] = {}
    barrier = threading.Barrier(8)

    def contend(client: str) -> None:
        barrier.wait()
        got: set[MessageQueue] = set()
        for _ in range(50):
            got |= locks.lock("g", client, Q)
        won[client] = got

    threads = [threading.Thread(target=contend, args=(f"c{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [q for got in won.values() for q in got]
    assert sorted(claimed) == sorted(Q)  # every queue to exactly one client
    for client, got in won.items():
        assert locks.locked_queues("g", client) == got
