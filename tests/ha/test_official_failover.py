"""The official ``rocketmq`` Producer, given every broker's gRPC endpoint (``"h:p1;h:p2"``),
keeps sending across a controller-mode failover (issue 15 item 5).

Two brokers of group ``g`` with sync replication on a real etcd; one thread sends with the
official client, synchronously, one message at a time; the master is SIGKILLed. Sends must
succeed again once the new master is elected (the client's own retries, plus ours on an
error), and every acknowledged body must be readable from the new master exactly once
(a duplicate can only be the one send in flight at the kill, stored then retried).
"""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from tests.ha.conftest import pull_all, wait_until
from tests.ha.controller_procs import ETCD, ControllerGroup, running_group
from tests.send_loop import OfficialProducer, SendLoop

pytestmark = pytest.mark.skipif(not Path(ETCD).exists(), reason="etcd is not installed")

SYNC = {"replication": "sync", "sync_replication_timeout_ms": 2_000, "ha_catch_up_window_ms": 3_000}
TOPIC = "OfficialFailover"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ControllerGroup]:
    with running_group(tmp_path, SYNC) as grp:
        yield grp


def test_official_producer_keeps_sending_across_a_failover(group: ControllerGroup) -> None:
    old = group.state()
    assert old is not None
    with RocketMQClient(group.procs[old.master].endpoint) as client:
        client.create_topic(TOPIC, queues=4)
    endpoints = ";".join(e for e in group.endpoints())
    sender = SendLoop(lambda: OfficialProducer(endpoints, TOPIC), TOPIC, b"o", retry_pause_s=0.05)
    try:
        wait_until(lambda: len(sender.acked) > 20, 30, "official sends flowing")
        killed_at = time.monotonic()
        group.procs[old.master].process.send_signal(signal.SIGKILL)
        wait_until(
            lambda: (s := group.state()) is not None and s.epoch > old.epoch, 30, "a new master"
        )
        wait_until(
            lambda: len(sender.started_after(killed_at)) >= 20,
            40,
            f"official sends acknowledged after the kill (errors: {sender.errors[-3:]})",
        )
    finally:
        acked = sender.stop()
    first_s = min(a.acked_s for a in sender.started_after(killed_at)) - killed_at
    print(
        f"\nofficial client failover: kill → first acknowledged send {first_s:.2f} s; "
        f"{len(acked)} acknowledged, {len(sender.errors)} send errors"
    )
    new = group.state()
    assert new is not None and new.master != old.master
    with RocketMQClient(group.procs[new.master].endpoint) as client:
        stored = collections.Counter(pull_all(client, TOPIC, 4))
    missing = [b for b in acked if b not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    in_flight = {a.body for a in sender.acked if a.started_s < killed_at < a.acked_s}
    twice = {b for b in acked if stored[b] > 1}
    assert twice <= in_flight, f"stored more than once: {sorted(twice - in_flight)[:5]}"
