"""The in-sync set's freshness rule (``ha/in_sync.py``), on a clock the test moves.

A slave in the set must hold everything the master had ``window_ms`` ago: that is what
bounds async replication's loss on a failover to it. The defect this pins down: a slave
back from a freeze (or a restart with a backlog) counted as caught up the moment it
reached a target set seconds before, and so re-entered the set holding only old bytes.
"""

from __future__ import annotations

import pytest

from broker_core.errors import ReplicationTimeoutError
from broker_core.ha.in_sync import InSyncSet


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Log:
    """The master's commitlog end, moved by the test."""

    def __init__(self, end: int) -> None:
        self.end = end

    def __call__(self) -> int:
        return self.end


@pytest.fixture
def clock() -> Clock:
    return Clock()


def in_sync_set(clock: Clock) -> InSyncSet:
    return InSyncSet(window_ms=1_000, min_replicas=1, clock=clock)


def test_a_slave_that_keeps_up_stays_in_the_set(clock: Clock) -> None:
    log, replicas = Log(1_000), in_sync_set(clock)
    replicas.join(1, "s", log)
    replicas.report(1, 1_000, log)
    assert replicas.members() == {"s": 1_000}
    for _ in range(50):  # continuous load: the slave is one report behind
        acked = log.end
        clock.now += 0.1
        log.end += 500
        replicas.report(1, acked, log)
        assert replicas.members() == {"s": acked}


def test_a_slave_back_from_a_freeze_rejoins_only_once_it_holds_recent_bytes(
    clock: Clock,
) -> None:
    log, replicas = Log(1_000), in_sync_set(clock)
    replicas.join(1, "s", log)
    replicas.report(1, 1_000, log)  # target: 1_000 as of t=100
    log.end = 2_000
    clock.now += 0.1
    replicas.report(1, 1_000, log)  # reached: fresh as of t=100, target 2_000 as of t=100.1
    clock.now += 5.0  # frozen for 5 s while the master writes on
    log.end = 50_000
    assert replicas.members() == {}, "a slave silent past the window leaves"
    # it resumes with the bytes its socket buffered before the freeze: it reaches the
    # target set 5 s ago, so it holds only what the master had then
    replicas.report(1, 2_000, log)
    assert replicas.members() == {}, "re-entered the set holding 5 s old bytes"
    clock.now += 0.2
    replicas.report(1, 50_000, log)  # holds what the master had 0.2 s ago
    assert replicas.members() == {"s": 50_000}


def test_a_slave_with_a_backlog_longer_than_the_window_joins_once_fresh(clock: Clock) -> None:
    log, replicas = Log(900_000), in_sync_set(clock)
    replicas.join(1, "s", log)  # a restarted slave: its log ends far behind the master
    replicas.report(1, 100_000, log)
    for _ in range(30):  # it copies 30 k per 0.1 s, the master writes 10 k per 0.1 s
        clock.now += 0.1
        log.end += 10_000
        replicas.report(1, replicas.connected()["s"] + 30_000, log)
        if replicas.members():
            break
    # it reached the join-time target (900 k) after 2.7 s: that alone proves nothing recent
    assert replicas.members() == {}
    while not replicas.members():
        clock.now += 0.1
        log.end += 10_000
        replicas.report(1, min(log.end, replicas.connected()["s"] + 30_000), log)
    joined_at, acked = clock.now, replicas.connected()["s"]
    assert acked >= log.end - 10 * 10_000, "joined holding less than the last window's bytes"
    assert joined_at > 100.0 + 3.0


def test_sync_sends_do_not_wait_for_a_slave_outside_the_set(clock: Clock) -> None:
    log, replicas = Log(1_000), in_sync_set(clock)
    replicas.join(1, "s", log)
    replicas.report(1, 1_000, log)
    replicas.wait(1_000, timeout_ms=0)  # acked: returns at once
    with pytest.raises(ReplicationTimeoutError, match="FLUSH_SLAVE_TIMEOUT"):
        replicas.wait(1_500, timeout_ms=0)
    clock.now += 2.0  # the slave falls out of the window: sends stop waiting for it
    replicas.wait(5_000, timeout_ms=0)


def test_a_send_waits_for_every_slave_etcd_lists_even_outside_the_local_set(
    clock: Clock,
) -> None:
    """RocketMQ #5663: while etcd's set is larger than the master's own view (a slave the
    master dropped, before its CAS lands), an ack must still wait for that slave: the
    controller may elect it."""
    log, replicas = Log(1_000), in_sync_set(clock)
    replicas.join(1, "s1", log)
    replicas.report(1, 1_000, log)
    replicas.join(2, "s2", log)  # connected, behind: not in the master's own set
    replicas.report(2, 500, log)
    assert replicas.members() == {"s1": 1_000}
    replicas.required = {"s2"}
    with pytest.raises(ReplicationTimeoutError, match="s2"):
        replicas.wait(1_000, timeout_ms=0)
    replicas.leave(2)  # gone altogether: still required until etcd drops it
    with pytest.raises(ReplicationTimeoutError, match="s2"):
        replicas.wait(1_000, timeout_ms=0)
    replicas.required = set()
    replicas.wait(1_000, timeout_ms=0)


def test_a_slave_holding_the_whole_log_is_fresh_as_of_its_report(clock: Clock) -> None:
    """Idle master: a heartbeat acking the log's end proves the slave holds everything the
    master has now, so a slave back from a freeze with nothing to copy is in at once."""
    log, replicas = Log(1_000), in_sync_set(clock)
    replicas.join(1, "s", log)
    replicas.report(1, 1_000, log)
    clock.now += 5.0  # frozen; the master took no writes meanwhile
    assert replicas.members() == {}
    replicas.report(1, 1_000, log)  # its first heartbeat after the freeze
    assert replicas.members() == {"s": 1_000}
    clock.now += 0.9  # fresh as of that heartbeat, not of the target set before the freeze
    assert replicas.members() == {"s": 1_000}
    clock.now += 0.2
    assert replicas.members() == {}
