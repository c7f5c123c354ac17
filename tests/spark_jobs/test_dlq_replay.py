"""dlq-replay against a real broker: dead letters made by POP receive + ForwardMessageToDLQ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from pyspark.sql import SparkSession
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client import OutgoingMessage, ReceivedMessage, RocketMQClient
from spark_jobs import dlq_replay
from tests.connector.conftest import BrokerProcess, new_topic
from tests.server.test_simple_consumer import received

ROOT = Path(__file__).resolve().parents[2]
GOOD = [json.dumps({"n": i}).encode() for i in range(3)]


def dead_letter(endpoint: str, topic: str, group: str, count: int) -> None:
    """POP-receive ``count`` messages of ``topic`` (queue 0) and forward each to the DLQ."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        messages = received(stub, topic, group)
        assert len(messages) == count
        for m in messages:
            request = service_pb2.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                receipt_handle=m.system_properties.receipt_handle,
                message_id=m.system_properties.message_id,
                delivery_attempt=1,
                max_delivery_attempts=1,
            )
            status = stub.ForwardMessageToDeadLetterQueue(request, timeout=5).status
            assert status.code == pb.Code.OK, status


def messages(client: RocketMQClient, topic: str) -> list[ReceivedMessage]:
    return client.pull("inspector", topic, 0, 0, 1000).messages


def make_dlq(client: RocketMQClient, endpoint: str) -> tuple[str, str, str]:
    """Two topics, one group: good JSON, bad JSON and a dropped tag, all dead-lettered."""
    group = new_topic(client, "g")  # a fresh unique name (the topic itself is unused)
    a, b = new_topic(client, "orders", queues=1), new_topic(client, "pay", queues=1)
    client.send_batch(
        a,
        [
            OutgoingMessage(GOOD[0], tag="T", keys=["k0"], properties={"p": "1"}),
            OutgoingMessage(b"{broken", tag="T"),
            OutgoingMessage(GOOD[1], tag="poison"),
        ],
    )
    client.send_batch(b, [OutgoingMessage(GOOD[2], tag="T"), OutgoingMessage(b"not json", tag="T")])
    dead_letter(endpoint, a, group, 3)
    dead_letter(endpoint, b, group, 2)
    return group, a, b


def test_replay_sends_good_messages_back_and_drops_bad_ones(
    spark: SparkSession,
    client: RocketMQClient,
    broker: BrokerProcess,
) -> None:
    group, a, b = make_dlq(client, broker.endpoint)
    assert len(messages(client, f"%DLQ%{group}")) == 5
    done = dlq_replay.run(spark, endpoints=broker.endpoint, group=group, drop_tags=["poison"])
    assert done.sent == {a: 1, b: 1} and done.dropped == {"json": 2, "tag": 1}
    [back_a] = messages(client, a)[3:]
    assert (back_a.body, back_a.tag, back_a.keys) == (GOOD[0], "T", ("k0",))
    assert back_a.properties == {"p": "1"}
    assert [m.body for m in messages(client, b)[2:]] == [GOOD[2]]
    [(_, offsets)] = done.next_offsets.items()
    again = dlq_replay.run(
        spark,
        endpoints=broker.endpoint,
        group=group,
        starting_offsets=json.dumps(done.next_offsets),
    )
    assert list(offsets.values()) == [5] and again.sent == {} and again.dropped == {}


def test_dry_run_and_limit_send_nothing(
    spark: SparkSession,
    client: RocketMQClient,
    broker: BrokerProcess,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group, a, b = make_dlq(client, broker.endpoint)
    done = dlq_replay.run(spark, endpoints=broker.endpoint, group=group, dry_run=True)
    assert done.dry_run and done.sent == {a: 2, b: 1} and done.dropped == {"json": 2}
    assert len(messages(client, a)) == 3 and len(messages(client, b)) == 2
    first = dlq_replay.run(spark, endpoints=broker.endpoint, group=group, dry_run=True, limit=1)
    assert sum(first.sent.values()) + sum(first.dropped.values()) == 1
    assert (
        dlq_replay.main(
            ["--endpoints", broker.endpoint, "--group", group, "--dry-run", "--drop-tag", "poison"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"would send 1 message(s) back to '{a}'" in out and "dropped 1 message(s): tag" in out
    assert len(messages(client, a)) == 3


def test_group_without_dead_letters(spark: SparkSession, broker: BrokerProcess) -> None:
    done = dlq_replay.run(spark, endpoints=broker.endpoint, group="never-failed")
    assert (done.sent, done.dropped) == ({}, {})


def test_help_and_bad_limit() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.dlq_replay", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--drop-tag" in done.stdout, done.stderr
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_jobs.dlq_replay",
            "--endpoints",
            "x",
            "--group",
            "g",
            "--limit",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--limit" in bad.stderr
