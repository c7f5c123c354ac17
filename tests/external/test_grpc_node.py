"""The official Node.js gRPC client (npm ``rocketmq-client-nodejs`` 1.0.8) against our broker.

A second implementation of the ``apache.rocketmq.v2`` protocol, written by others: our
script ``grpc_node/interop.js`` drives its Producer and SimpleConsumer (normal and FIFO)
through a real broker process, and the official Python client checks what it sent.
The npm package is installed once per machine by :func:`ensure_node_modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from broker_core.client import RocketMQClient
from tests.external.node_setup import ensure_node_modules
from tests.server.conftest import BrokerProcess, start_broker

PACKAGE_DIR = Path(__file__).parent / "grpc_node"
SCRIPT = PACKAGE_DIR / "interop.js"
NODE_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def node_modules() -> Path:
    return ensure_node_modules(PACKAGE_DIR)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, node_modules: Path) -> Iterator[BrokerProcess]:
    # push consumers take their long-poll time from the broker's settings and wait for an
    # in-flight poll on shutdown: 3 s instead of 30 keeps each script to a few seconds
    proc = start_broker(
        tmp_path_factory.mktemp("node-broker"), config={"broker": {"max_long_polling_ms": 3_000}}
    )
    with RocketMQClient(proc.endpoint) as admin:
        admin.create_topic("node-normal", queues=2)
        admin.create_topic("node-fifo", queues=2, message_type="FIFO")
        admin.create_group("node-fifo-group", fifo=True, consume_from_where="first_offset")
        admin.create_topic("node-prio", queues=4, message_type="PRIORITY")
        admin.create_group("node-prio-group", consume_from_where="first_offset")
        admin.create_topic("node-lite", queues=2, message_type="LITE")
        admin.create_topic("node-prio0", queues=2)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def node(broker: BrokerProcess, tmp_path: Path, *args: str, **extra_env: str) -> dict[str, Any]:
    """Run the interop script; its JSON answer. The client logs under ``$HOME/logs``."""
    env = {**os.environ, "HOME": str(tmp_path), **extra_env}
    done = subprocess.run(
        ["node", str(SCRIPT), broker.endpoint, *args],
        cwd=PACKAGE_DIR,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_node_producer_to_node_and_python_consumers(broker, tmp_path) -> None:
    sent = node(broker, tmp_path, "produce", "node-normal", "-", "10")["sent"]
    assert len(set(sent)) == 10
    got = node(broker, tmp_path, "consume", "node-normal", "node-simple", "10")["got"]
    assert sorted(m["id"] for m in got) == sorted(sent)
    by_body = {m["body"]: m for m in got}
    assert by_body["node-3"]["tag"] == "b" and by_body["node-3"]["keys"] == ["k3"]
    with RocketMQClient(broker.endpoint) as client:  # the same bytes, read by offset
        stored = [
            m for q in (0, 1) for m in client.pull("node-check", "node-normal", q, 0, 32).messages
        ]
    assert sorted(m.body for m in stored) == sorted(f"node-{i}".encode() for i in range(10))


def test_python_producer_to_node_simple_consumer(broker, tmp_path) -> None:
    producer = Producer(ClientConfiguration(broker.endpoint, Credentials()), ("node-normal",))
    producer.startup()
    try:
        ids = []
        for i in range(5):
            msg = Message()
            msg.topic, msg.body, msg.tag = "node-normal", f"py-{i}".encode(), "py"
            ids.append(producer.send(msg).message_id)
    finally:
        producer.shutdown()
    got = node(broker, tmp_path, "consume", "node-normal", "node-from-py", "15")["got"]
    py = [m for m in got if m["body"].startswith("py-")]
    assert sorted(m["id"] for m in py) == sorted(ids) and {m["tag"] for m in py} == {"py"}


def test_node_fifo_messages_arrive_in_order_per_group(broker, tmp_path) -> None:
    answer = node(broker, tmp_path, "fifo", "node-fifo", "node-fifo-group", "12")
    assert len(answer["sent"]) == 12
    got = answer["got"]
    assert len(got) == 12
    for group in ("g0", "g1", "g2"):
        bodies = [m["body"] for m in got if m["group"] == group]
        assert bodies == [f"{group}-{i}" for i in range(12) if f"g{i % 3}" == group]


def test_node_send_to_a_fifo_topic_without_group_is_refused(broker, tmp_path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        ["node", str(SCRIPT), broker.endpoint, "produce", "node-fifo", "-", "1"],
        cwd=PACKAGE_DIR,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 1
    assert "FIFO" in done.stderr or "message type" in done.stderr.lower(), done.stderr[-2000:]


def test_node_priority_messages_highest_first(broker, tmp_path) -> None:
    answer = node(broker, tmp_path, "priority", "node-prio", "node-prio-group", "5")
    assert [m["body"] for m in answer["got"]] == [  # priorities 3, 4, 5 share queue 3
        "priority-3",
        "priority-4",
        "priority-5",
        "priority-2",
        "priority-1",
    ]
    assert [m["priority"] for m in answer["got"]] == [3, 4, 5, 2, 1]


def test_node_priority_zero_declared_normal_is_taken_as_priority(broker, tmp_path) -> None:
    """The Node client declares priority 0 as NORMAL; like RocketMQ, the broker takes the
    type from the fields: the message is a PRIORITY one, in queue 0."""
    sent = node(broker, tmp_path, "produce", "node-prio0", "-", "3", PRIORITY="0")["sent"]
    with RocketMQClient(broker.endpoint) as client:
        stored = client.pull("node-check", "node-prio0", 0, 0, 32).messages
        assert [client.pull("node-check", "node-prio0", 1, 0, 32).messages] == [[]]
    assert sorted(m.message_id for m in stored) == sorted(sent)  # all in queue 0, none in 1


def test_node_lite_push_consumer_gets_only_its_lite_topics(broker, tmp_path) -> None:
    answer = node(broker, tmp_path, "lite", "node-lite", "node-lite-group", "5")
    assert len(answer["sent"]) == 6
    assert sorted((m["body"], m["liteTopic"]) for m in answer["got"]) == [
        (f"lite-{i}", f"lt-{i}") for i in range(5)
    ]
