"""A slave promoted before it copied its master's topic table loses nothing.

Two brokers of group ``g`` on a real etcd, with sync replication; the slave copies the
master's config tables once at start and then not for an hour (``ha_metadata_interval_ms``),
so a topic created on the master afterwards reaches the slave only as replicated
commitlog bytes. The master is SIGKILLed; the slave elected master must go on from the
offsets its log holds: every acknowledged body readable, no queue offset given twice.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import RocketMQError
from broker_core.server.launcher import BrokerProcess
from tests.ha.conftest import wait_until
from tests.ha.controller_procs import ETCD, ControllerGroup, running_group

pytestmark = pytest.mark.skipif(not Path(ETCD).exists(), reason="etcd is not installed")

BROKER = {
    "replication": "sync",
    "sync_replication_timeout_ms": 2_000,
    "ha_catch_up_window_ms": 3_000,
    "ha_metadata_interval_ms": 3_600_000,  # the slave never learns the new topic's config
}
TOPIC = "LateTopic"
QUEUES = 8  # more than the default queue nums (4)


def _send_until_acked(endpoint: str, body: bytes, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    with RocketMQClient(endpoint, max_attempts=1, timeout_s=3) as client:
        while True:
            try:
                client.send(TOPIC, body)
                return
            except RocketMQError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)


def _read_all(endpoint: str, queues: int = QUEUES) -> list[tuple[int, int, bytes]]:
    """(queue id, queue offset, body) of every message in the topic's first ``queues``."""
    found: list[tuple[int, int, bytes]] = []
    with RocketMQClient(endpoint) as client:
        for qid in range(queues):
            offset = 0
            while True:
                batch = client.pull("late-reader", TOPIC, qid, offset, 256)
                found.extend((m.queue_id, m.queue_offset, m.body) for m in batch.messages)
                if batch.next_offset >= batch.max_offset:
                    break
                offset = batch.next_offset
    return found


def _kill_master(grp: ControllerGroup) -> BrokerProcess:
    """SIGKILL the master, wait for the other broker to be elected; returns it."""
    state = grp.state()
    assert state is not None
    old = grp.procs[state.master]
    old.process.send_signal(signal.SIGKILL)
    old.process.wait(10)
    wait_until(lambda: _epoch(grp) > state.epoch, 30, "a new master")
    return next(p for n, p in grp.procs.items() if n != state.master)


def test_promoted_slave_continues_queues_of_a_topic_it_has_no_config_for(
    tmp_path: Path,
) -> None:
    with running_group(tmp_path, BROKER) as grp:
        old = grp.master()
        state = grp.state()
        assert state is not None
        with RocketMQClient(old.endpoint) as client:
            client.create_topic(TOPIC, read_queues=QUEUES, write_queues=QUEUES)
        bodies = [f"m{i}".encode() for i in range(24)]
        before, after = bodies[:12], bodies[12:]
        for body in before:  # acknowledged with sync replication: the slave has them
            _send_until_acked(old.endpoint, body)
        slave = next(p for n, p in grp.procs.items() if n != state.master)
        slave_topics = (slave.store_dir / "config" / "topics.json").read_text()
        assert TOPIC not in slave_topics  # the premise: the slave lacks the config
        assert _kill_master(grp) is slave
        for body in after:
            _send_until_acked(slave.endpoint, body)
        stored = _read_all(slave.endpoint)
        places = [(qid, offset) for qid, offset, _ in stored]
        assert len(places) == len(set(places)), f"queue offsets given twice: {sorted(places)}"
        missing = set(bodies) - {body for _, _, body in stored}
        assert not missing, f"acknowledged but not readable: {sorted(missing)}"
        assert len(stored) == len(bodies)


def _epoch(grp: ControllerGroup) -> int:
    state = grp.state()
    return state.epoch if state is not None else 0


def test_topic_deleted_and_made_again_on_the_master_starts_its_queues_afresh_on_the_slave(
    tmp_path: Path,
) -> None:
    """The slave knows the topic (copied at its start) but not that the master deleted it:
    the master's queues of the new topic restart at offset 0 while the slave's old queues
    go on; the master's acknowledged messages must be readable after the failover."""
    with running_group(tmp_path, BROKER, members=("a",)) as grp:
        master = grp.master()
        for body in (b"old0", b"old1", b"old2", b"old3", b"old4"):
            _send_until_acked(master.endpoint, body)
        grp.start("b")  # copies the master's table (with the topic) once, at its start
        wait_until(lambda: len(grp.state().in_sync) == 2, 30, "b in sync")  # type: ignore[union-attr]
        with RocketMQClient(master.endpoint) as client:
            client.delete_topic(TOPIC)
        again = [f"new{i}".encode() for i in range(6)]
        for body in again:  # auto-created again: its queues start at offset 0
            _send_until_acked(master.endpoint, body)
        slave = _kill_master(grp)
        later = [f"later{i}".encode() for i in range(6)]
        for body in later:
            _send_until_acked(slave.endpoint, body)
        stored = _read_all(slave.endpoint, 4)
        places = [(qid, offset) for qid, offset, _ in stored]
        assert len(places) == len(set(places)), f"queue offsets given twice: {sorted(places)}"
        missing = set(again + later) - {body for _, _, body in stored}
        assert not missing, f"acknowledged but not readable: {sorted(missing)}"
