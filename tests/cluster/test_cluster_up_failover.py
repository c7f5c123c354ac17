"""What issue 30 asks the one-command cluster to show: ``rmq cluster up --brokers 2
--replicas 3 --controller``; the official client sends through group b's endpoints while
group a's master is SIGKILLed. The cluster keeps running, a elects a new master, the
application sees no error (the client's own retries aside), and every acknowledged
message is read back from the groups' masters."""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path

import pytest
from rocketmq import Message

from broker_core.cli_cluster import create_topic_everywhere
from broker_core.client import RocketMQClient
from broker_core.ha.etcd_state import EtcdGroup, GroupState
from tests.cluster.up_procs import ClusterUp
from tests.ha.conftest import pull_all, wait_until
from tests.ha.controller_procs import ETCD
from tests.send_loop import OfficialProducer, SendLoop

pytestmark = pytest.mark.skipif(not Path(ETCD).exists(), reason="etcd is not installed")

TOPIC = "UpFailover"
QUEUES = 2


def _state(up: ClusterUp, group: str) -> GroupState:
    state = EtcdGroup(up.endpoints()["controller"], group).state()[0]
    assert state is not None
    return state


def _master(up: ClusterUp, group: str) -> dict[str, object]:
    """The endpoints.json entry of ``group``'s master (by its gRPC endpoint in etcd)."""
    etcd = EtcdGroup(up.endpoints()["controller"], group)
    state = etcd.state()[0]
    assert state is not None
    endpoint = etcd.members()[state.master]["endpoint"]
    return next(b for b in up.endpoints()["brokers"].values() if b["grpc"] == endpoint)


class WhereProducer(OfficialProducer):
    """The official Producer; ``send`` returns (broker group, queue id, offset)."""

    def send(self, topic: str, body: bytes) -> tuple[str, int, int]:  # type: ignore[override]
        message = Message()
        message.topic, message.body = topic, body
        receipt = self._producer.send(message)
        queue = receipt.message_queue.message_queue0()
        return str(queue.broker.name), int(queue.id), int(receipt.offset)


def _holders(up: ClusterUp, bodies: list[bytes]) -> dict[str, int]:
    """How many of ``bodies`` each live broker holds (a diagnosis for a failure)."""
    out = {}
    for key, broker in up.endpoints()["brokers"].items():
        try:
            with RocketMQClient(broker["grpc"], max_attempts=1, timeout_s=5) as client:
                held = set(pull_all(client, TOPIC, QUEUES))
        except Exception as exc:  # a dead broker: say so
            out[key] = repr(exc)[:80]
            continue
        out[key] = sum(b in held for b in bodies)
    return out


def _run(tmp_path: Path, groups: int, replicas: int) -> None:
    names = [f"broker-{c}" for c in "ab"[:groups]]
    up = ClusterUp.start(
        tmp_path / "c", "--brokers", str(groups), "--replicas", str(replicas), "--controller"
    )
    sender = None
    try:
        for group in names:
            wait_until(lambda g=group: len(_state(up, g).in_sync) == replicas, 60, "in sync")  # type: ignore[misc]
        create_topic_everywhere(up.printed["namesrv"][0], None, TOPIC, queues=QUEUES)
        brokers = up.endpoints()["brokers"]
        entry = names[-1]  # the client dials the last group only
        endpoints = ";".join(b["grpc"] for b in brokers.values() if b["group"] == entry)
        sender = SendLoop(lambda: WhereProducer(endpoints, TOPIC), TOPIC, b"u")
        victim_group = names[0]
        wait_until(
            lambda: any(a.by[0] == victim_group for a in list(sender.acked)), 60, "sends to a"
        )
        old = _state(up, victim_group)
        victim = _master(up, victim_group)
        killed_at = time.monotonic()
        os.kill(int(str(victim["pid"])), signal.SIGKILL)
        wait_until(lambda: _state(up, victim_group).epoch > old.epoch, 30, "a new master")
        wait_until(
            lambda: sum(a.by[0] == victim_group for a in sender.started_after(killed_at)) >= 10,
            60,
            f"sends stored in {victim_group} again (errors: {sender.errors[-3:]})",
        )
        acked = sender.stop()
        assert up.process.poll() is None, up.lines[-20:]
        assert not sender.errors, f"{len(sender.errors)} sends failed: {sender.errors[:3]}"
        first_s = min(a.acked_s for a in sender.started_after(killed_at) if a.by[0] == victim_group)
        print(f"\ncluster up failover: kill → first send stored in a {first_s - killed_at:.2f} s")
        stored: collections.Counter[bytes] = collections.Counter()
        for group in names:
            with RocketMQClient(str(_master(up, group)["grpc"])) as client:
                stored.update(pull_all(client, TOPIC, QUEUES))
        missing = [b for b in acked if b not in stored]
        assert not missing, (
            f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}; "
            f"killed {victim}, old state {old}, now {_state(up, victim_group)}; "
            f"held by: {_holders(up, missing)}; "
            f"sent to: {[(a.body, a.by) for a in sender.acked if a.body in set(missing)][:8]}"
        )
        assert up.stop() == 0
    finally:
        if sender is not None and sender._threads.threads[0].is_alive():
            sender.stop()
        up.kill()


@pytest.mark.slow
def test_two_groups_of_three_keep_serving_the_official_client_across_a_failover(
    tmp_path: Path,
) -> None:
    _run(tmp_path, groups=2, replicas=3)


def test_two_groups_of_two_keep_serving_the_official_client_across_a_failover(
    tmp_path: Path,
) -> None:
    """The normal suite's shorter variant: two brokers per group."""
    _run(tmp_path, groups=2, replicas=2)
