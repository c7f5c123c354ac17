"""The RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4, ``librocketmq.so``) through our
NameServer and broker, given only the NameServer address.

Each scenario runs the client in child processes (``tests/external/cpp/*.py`` under the
``.venv-cpp`` interpreter) and checks what they print.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from broker_core.client.client import RocketMQClient
from broker_core.errors import RocketMQError
from broker_core.namesrv.client import NameServerClient
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode
from broker_core.remoting.command import RemotingCommand
from tests.external.conftest import HERE, Cluster4x, spawn

CPP = HERE / "cpp"


def create_topic(cluster: Cluster4x, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on the broker and wait until the NameServer routes it (clients that
    find no route fall back to the default topic, which a lone test broker lacks)."""
    with RocketMQClient(cluster.grpc) as client:
        client.create_topic(topic, queues=queues)
    wait_routed(cluster, topic, queues)


def wait_routed(cluster: Cluster4x, topic: str, queues: int) -> None:
    """Wait until the NameServer routes ``topic`` with ``queues`` read queues."""
    names = NameServerClient(cluster.namesrv)
    deadline = time.monotonic() + 20
    try:
        while True:
            try:
                if names.get_route(topic).queue_datas[0].read_queue_nums == queues:
                    return
            except RocketMQError:
                pass
            assert time.monotonic() < deadline, f"no route for {topic}"
            time.sleep(0.05)
    finally:
        names.close()


def produce(python: Path, cluster: Cluster4x, topic: str, count: int, *extra: str) -> list[dict]:
    cmd = [str(python), str(CPP / "produce.py"), cluster.namesrv, topic, str(count), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == count and all(x["status"] == 0 for x in lines)
    return lines


def consumer(python: Path, cluster: Cluster4x, topic: str, group: str, *extra: str):
    return spawn(
        [str(python), str(CPP / "consume.py"), cluster.namesrv, topic, group, *extra], ready=True
    )


def consumer_ids(cluster: Cluster4x, group: str) -> list[str]:
    """GET_CONSUMER_LIST_BY_GROUP asked of the broker over remoting."""
    client = RemotingClient(cluster.remoting)
    try:
        resp = client.invoke(
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
            ),
            5.0,
        )
    finally:
        client.close()
    if resp.code != 0:
        return []
    return list(json.loads(resp.body)["consumerIdList"])


def test_produce_1000_then_push_consume_exactly_once(cpp_python: Path, cluster4x: Cluster4x):
    create_topic(cluster4x, "cpp-all")
    sent = produce(cpp_python, cluster4x, "cpp-all", 1000, "--delay-every", "100")
    assert len({s["msg_id"] for s in sent}) == 1000
    sub = consumer(cpp_python, cluster4x, "cpp-all", "cpp-g1")
    try:
        got = sub.wait_for(1000, 60)
    finally:
        assert sub.stop() == 0
    bodies = Counter(str(x["body"]) for x in got)
    assert set(bodies) == {f"m-{i}" for i in range(1000)}, sub.other[-20:]
    assert max(bodies.values()) == 1, [b for b, n in bodies.items() if n > 1][:5]
    tags = {str(x["body"]): x["tags"] for x in got}
    assert tags["m-0"] == "TagA" and tags["m-1"] == "TagB" and tags["m-3"] == ""
    assert {x["q"] for x in got} == {0, 1, 2, 3}


def wait_members(cluster: Cluster4x, group: str, count: int, timeout_s: float = 20) -> list[str]:
    """The group's consumer ids once there are exactly ``count`` (or at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ids = consumer_ids(cluster, group)
        if len(ids) == count or time.monotonic() > deadline:
            return ids
        time.sleep(0.1)


def _queues_by_consumer(subs: list, prefix: str) -> list[set[int]]:
    return [{int(x["q"]) for x in s.lines if str(x["body"]).startswith(prefix)} for s in subs]


def _received(subs: list, prefix: str, count: int, timeout_s: float) -> Counter[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        bodies = Counter(
            str(x["body"]) for s in subs for x in s.lines if str(x["body"]).startswith(prefix)
        )
        if len(bodies) >= count or time.monotonic() > deadline:
            return bodies
        time.sleep(0.05)


def test_two_push_consumers_split_the_queues(cpp_python: Path, cluster4x: Cluster4x):
    """The clients' own rebalance (AllocateMessageQueueAveragely) splits 4 queues 2/2 once
    the broker tells both (NOTIFY_CONSUMER_IDS_CHANGED); probes run until it has."""
    create_topic(cluster4x, "cpp-split")
    subs = [
        consumer(cpp_python, cluster4x, "cpp-split", "cpp-g2", "--instance", f"c{i}")
        for i in range(2)
    ]
    try:
        assert len(wait_members(cluster4x, "cpp-g2", 2)) == 2
        deadline = time.monotonic() + 60
        for round_no in itertools.count():  # probes until each queue has one owner
            prefix = f"probe{round_no}"
            produce(cpp_python, cluster4x, "cpp-split", 16, "--body-prefix", prefix)
            assert len(_received(subs, prefix + "-", 16, 30)) == 16
            owned = _queues_by_consumer(subs, prefix + "-")
            if (all(owned) and not owned[0] & owned[1]) or time.monotonic() > deadline:
                break
        produce(cpp_python, cluster4x, "cpp-split", 200)
        bodies = _received(subs, "m-", 200, 60)
        # One leaves: the broker tells the other, which takes every queue.
        assert subs[0].stop() == 0
        assert len(wait_members(cluster4x, "cpp-g2", 1)) == 1
        produce(cpp_python, cluster4x, "cpp-split", 40, "--body-prefix", "after")
        after = _received(subs[1:], "after-", 40, 60)
    finally:
        codes = [s.stop() for s in subs]
    assert codes == [0, 0]
    assert set(after) == {f"after-{i}" for i in range(40)}
    assert _queues_by_consumer(subs[1:], "after-") == [{0, 1, 2, 3}]
    assert set(bodies) == {f"m-{i}" for i in range(200)} and max(bodies.values()) == 1
    queues = _queues_by_consumer(subs, "m-")
    assert queues[0] and queues[1] and not queues[0] & queues[1], queues
    assert queues[0] | queues[1] == {0, 1, 2, 3}


def test_tag_subscription_filters(cpp_python: Path, cluster4x: Cluster4x):
    create_topic(cluster4x, "cpp-tags")
    produce(cpp_python, cluster4x, "cpp-tags", 60)
    sub = consumer(cpp_python, cluster4x, "cpp-tags", "cpp-g3", "--expression", "TagB")
    want = {f"m-{i}" for i in range(60) if i % 2 == 1 and i % 3 == 1}
    try:
        got = sub.wait_for(len(want), 30)
    finally:
        sub.stop()
    assert {str(x["body"]) for x in got} == want


def test_orderly_consumer_gets_each_queue_in_order(cpp_python: Path, cluster4x: Cluster4x):
    create_topic(cluster4x, "cpp-order")
    produce(cpp_python, cluster4x, "cpp-order", 300, "--orderly-keys", "4")
    sub = consumer(cpp_python, cluster4x, "cpp-order", "cpp-g4", "--orderly")
    try:
        got = sub.wait_for(300, 60)
    finally:
        sub.stop()
    assert len(got) == 300, sub.other[-20:]
    per_queue: dict[int, list[int]] = defaultdict(list)
    per_key: dict[int, list[int]] = defaultdict(list)
    for x in got:
        per_queue[int(x["q"])].append(int(x["o"]))
        i = int(str(x["body"]).split("-")[1])
        per_key[i % 4].append(i)
    assert all(offs == sorted(offs) for offs in per_queue.values())
    assert all(seq == sorted(seq) for seq in per_key.values())
    assert len(per_queue) > 1


def test_failed_message_is_retried_then_dead_lettered(cpp_python: Path, cluster4x: Cluster4x):
    create_topic(cluster4x, "cpp-retry")
    # The client looks routes up every 30 s and at start; a retry topic the broker made at
    # the first heartbeat would be seen only at the next look-up. Creating the group makes
    # its retry topic, so it is routed before the consumer starts.
    with RocketMQClient(cluster4x.grpc) as client:  # 2 retries, 1 s apart (delay level 1)
        client.create_group("cpp-g5", max_retries=2, retry_backoff="1s")
    wait_routed(cluster4x, "%RETRY%cpp-g5", 1)
    # Only the failing message: this client answers a whole pull batch at once (the C API's
    # per-message callback results are folded into one status), so a message pulled with
    # it would be sent back too.
    produce(cpp_python, cluster4x, "cpp-retry", 1, "--body-prefix", "fail", "--group", "pg5")
    sub = consumer(cpp_python, cluster4x, "cpp-retry", "cpp-g5", "--fail-prefix", "fail")
    try:
        got = sub.wait_for(3, 40)  # delivered 3 times: first try + 2 retries
    finally:
        sub.stop()
    fails = [x for x in got if str(x["body"]).startswith("fail")]
    assert [x["reconsume"] for x in fails] == [0, 1, 2], "\n".join(map(str, got))
    gaps = [float(b["t"]) - float(a["t"]) for a, b in itertools.pairwise(fails)]
    assert all(gap >= 0.9 for gap in gaps), gaps  # each retry held at delay level 1 (1 s)
    with RocketMQClient(cluster4x.grpc) as client:
        dead = client.pull("cpp-g5-dlq-reader", "%DLQ%cpp-g5", 0, 0, 10)
    assert [m.body for m in dead.messages] == [b"fail-0"]


def test_batch_send_and_pull_consumer(cpp_python: Path, cluster4x: Cluster4x):
    create_topic(cluster4x, "cpp-batch")
    cmd = [
        str(cpp_python),
        str(CPP / "batch_and_pull.py"),
        cluster4x.namesrv,
        "cpp-batch",
        "100",
        "10",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    batches = [x for x in lines if "batch" in x]
    assert len(batches) == 10 and all(x["status"] == 0 for x in batches)
    pulled = [x for x in lines if "body" in x]
    assert sorted(str(x["body"]) for x in pulled) == sorted(f"b-{i}" for i in range(0, 100, 2))
    per_queue = defaultdict(list)
    for x in pulled:
        per_queue[int(x["q"])].append(int(x["o"]))
    assert all(offsets == sorted(offsets) for offsets in per_queue.values())


@pytest.mark.slow
def test_default_retry_policy_waits_delay_level_3(cpp_python: Path, cluster4x: Cluster4x):
    """RocketMQ's default: first retry at delay level 3 (10 s). Nothing is prepared: the
    retry topic is made at the consumer's first heartbeat, and the client sees its route
    at its next route refresh (every 30 s), so the retry arrives within about 40 s."""
    create_topic(cluster4x, "cpp-retry-default")
    produce(cpp_python, cluster4x, "cpp-retry-default", 1, "--body-prefix", "fail")
    sub = consumer(cpp_python, cluster4x, "cpp-retry-default", "cpp-g6", "--fail-prefix", "fail")
    try:
        got = sub.wait_for(2, 90)
    finally:
        sub.stop()
    assert [x["reconsume"] for x in got[:2]] == [0, 1], got
    assert float(got[1]["t"]) - float(got[0]["t"]) >= 9.5
