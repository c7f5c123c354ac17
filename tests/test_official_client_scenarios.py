"""The official Python client's example scenarios, as our own scripts, against a real broker.

``examples/official_client/`` holds one short script per scenario of apache/rocketmq-clients'
``python/example/`` (normal, async, delay, FIFO, transaction, simple, async simple and push
consumers, priority, lite producer and LitePushConsumer) — written here, not copied, using
the same public API. Each runs as its own process and prints what it achieved; these tests
check that against the broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, start_broker

ROOT = Path(__file__).resolve().parent.parent
SCRIPT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("scenarios"))
    with RocketMQClient(proc.endpoint) as admin:  # as a user would with mqadmin updateTopic
        for normal in ("ex-normal", "ex-async", "ex-push"):  # the official producer looks the
            admin.create_topic(normal, queues=2)  # route up first: no topic, no send
        admin.create_topic("ex-delay", queues=2, message_type="DELAY")
        admin.create_topic("ex-fifo", queues=2, message_type="FIFO")
        admin.create_group("ex-fifo-g", fifo=True, consume_from_where="first_offset")
        admin.create_topic("ex-tx", queues=2, message_type="TRANSACTION")
        admin.create_topic("ex-prio", queues=4, message_type="PRIORITY")
        admin.create_topic("ex-lite", queues=2, message_type="LITE")
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def run(broker: BrokerProcess, script: str, *args: object) -> dict[str, Any]:
    """Run ``examples.official_client.<script>`` with the endpoint first; its JSON answer."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            f"examples.official_client.{script}",
            broker.endpoint,
            *map(str, args),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_normal_producer_then_simple_consumer(broker) -> None:
    sent = run(broker, "normal_producer", "ex-normal", 5)["sent"]
    got = run(broker, "simple_consumer", "ex-normal", "ex-simple", 5)["got"]
    assert sorted(m["id"] for m in got) == sorted(sent)
    assert {m["tag"] for m in got} == {"normal"}


def test_async_producer_then_async_simple_consumer(broker) -> None:
    answer = run(broker, "async_producer", "ex-async", 6)
    assert answer["failed"] == [] and len(answer["sent"]) == 6
    got = run(broker, "async_simple_consumer", "ex-async", "ex-async-g", 6)["got"]
    assert sorted(m["id"] for m in got) == sorted(answer["sent"])


def test_push_consumer_gets_every_message(broker) -> None:
    sent = run(broker, "normal_producer", "ex-push", 4)["sent"]
    got = run(broker, "push_consumer", "ex-push", "ex-push-g", 4)["got"]
    assert sorted(m["id"] for m in got) == sorted(sent)


def test_delayed_message_arrives_at_its_time(broker) -> None:
    answer = run(broker, "delay_producer", "ex-delay", 2)
    got = run(broker, "simple_consumer", "ex-delay", "ex-delay-g", 1)["got"]
    assert [m["id"] for m in got] == [answer["sent"]]
    assert got[0]["received_at_s"] >= answer["deliver_at_s"] - 0.5  # timer slots are 0.1 s


def test_fifo_messages_arrive_in_order_per_message_group(broker) -> None:
    sent = run(broker, "fifo_producer", "ex-fifo", 8)["sent"]
    got = run(broker, "simple_consumer", "ex-fifo", "ex-fifo-g", 8)["got"]
    assert sorted(m["id"] for m in got) == sorted(sent)
    for group in ("group-0", "group-1"):
        bodies = [m["body"] for m in got if m["group"] == group]
        assert bodies == [f"{group}:{i}" for i in range(8) if f"group-{i % 2}" == group]


def test_transactions_commit_roll_back_and_resolve_by_check(broker) -> None:
    committed = run(broker, "transaction_producer", "ex-tx", "commit")
    rolled_back = run(broker, "transaction_producer", "ex-tx", "rollback")
    checked = run(broker, "transaction_producer", "ex-tx", "check")
    assert checked["checked"] == [checked["sent"]]  # the broker asked, the checker committed
    assert committed["checked"] == [] and rolled_back["checked"] == []
    got = run(broker, "simple_consumer", "ex-tx", "ex-tx-g", 2)["got"]
    assert sorted(m["id"] for m in got) == sorted([committed["sent"], checked["sent"]])
    with RocketMQClient(broker.endpoint) as client:  # the rolled-back one was never visible
        stored = [
            m.body for q in (0, 1) for m in client.pull("ex-tx-check", "ex-tx", q, 0, 32).messages
        ]
    assert sorted(stored) == [b"tx-check", b"tx-commit"]


def test_priority_producer_then_highest_priority_first(broker) -> None:
    run(broker, "priority_producer", "ex-prio", 6)  # priorities 0..5 over 4 queues
    got = run(broker, "simple_consumer", "ex-prio", "ex-prio-g", 6)["got"]
    assert [m["body"] for m in got] == [
        "priority-3",
        "priority-4",
        "priority-5",
        "priority-2",
        "priority-1",
        "priority-0",
    ]
    assert [m["priority"] for m in got] == [3, 4, 5, 2, 1, 0]


def test_lite_producer_then_lite_push_consumer(broker) -> None:
    sent = run(broker, "lite_producer", "ex-lite", 10)["sent"]
    got = run(broker, "lite_push_consumer", "ex-lite", "ex-lite-g", 10)["got"]
    assert sorted(m["id"] for m in got) == sorted(sent)
    assert {(m["body"], m["lite_topic"]) for m in got} == {
        (f"lite-{i}", f"lite-test-{i}") for i in range(10)
    }
