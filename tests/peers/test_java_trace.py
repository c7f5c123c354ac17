"""Message trace with the real Java 4.x client against our broker (issue 25).

Our NameServer and broker start once for the module with ``trace_topic_enable`` (so
``RMQ_SYS_TRACE_TOPIC`` exists and is registered) and the broker's own records on
(``trace_broker = "all"``). The Java driver (``peers/java/Client4.java traced``) sends one
message with ``DefaultMQProducer(group, enableMsgTrace=true)`` and consumes it with a
``DefaultMQPushConsumer`` with trace on; both shut down, which flushes their trace data
(Pub, SubBefore, SubAfter) to the trace topic through our remoting front end. Then:

* RocketMQ's own ``mqadmin queryMsgTraceById -i MSG_ID`` (QUERY_MESSAGE on the trace
  topic by that key, decoded by RocketMQ's TraceDataEncoder) prints the Pub row of the
  producer group and the Sub row (its SubAfter) of the consumer group, although the trace
  topic also holds the broker's own records of that message;
* ``rmq message trace MSG_ID --json`` merges the client records with the broker's own
  (Stored, Delivered) in one time-ordered timeline.

Two defects this found (each failed here before its fix): the broker refused client sends
to RMQ_SYS_TRACE_TOPIC as one of its own topics (the Pub was lost), and 4.x pull records
carried no ``MSG_REGION``, for which the Java consumer drops its SubBefore/SubAfter.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from tests.conformance.targets import Target, start_ours

TOPIC = "JTrace"
GROUP = "GJTrace"
PRODUCER_GROUP = f"PID_{TOPIC}"  # what Client4.java names its producer group
TRACE_CONFIG = {
    "broker": {"trace_topic_enable": True, "trace_broker": "all", "trace_flush_interval_ms": 50}
}
CLIENT_TYPES = {"Pub", "SubBefore", "SubAfter"}
BROKER_TYPES = {"Stored", "Delivered"}
TRACE_WAIT_S = 30  # the broker's trace thread writes its records every 50 ms


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    target = start_ours(tmp_path_factory.mktemp("ours"), TRACE_CONFIG)
    try:
        yield target
    finally:
        target.stop()


@pytest.fixture(scope="module")
def msg_id(ours: Target) -> str:
    """The id of the one message the traced Java producer sent and its consumer received."""
    with RocketMQClient(ours.grpc) as admin:
        admin.create_topic(TOPIC, queues=4)
    run = ours.c4("traced", TOPIC, GROUP, "60")
    assert run.error is None, run.error
    assert run.of("consumed") == [{"event": "consumed", "value": True}], run.events
    stored = [(e["type"], e["value"]) for e in run.of("trace_stored")]
    assert stored == [("Pub", True), ("SubAfter", True)], run.events  # the clients' own query
    (sent,) = run.of("sent")
    assert sent["status"] == "SEND_OK"
    return str(sent["msg_id"])


def trace_json(ours: Target, msg_id: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        cli, ["message", "trace", msg_id, "--json", "--endpoints", ours.grpc]
    )
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.output)
    return found


@pytest.fixture(scope="module")
def timeline(ours: Target, msg_id: str) -> dict[str, Any]:
    """``rmq message trace MSG_ID --json`` once the client and broker records are all in
    (the clients flushed theirs before the driver exited; the broker's come within its
    flush interval)."""
    deadline = time.monotonic() + TRACE_WAIT_S
    while True:
        found = trace_json(ours, msg_id)
        types = {e["type"] for e in found["events"]}
        if types >= CLIENT_TYPES | BROKER_TYPES or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def rows(out: str, first: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.split()[:1] == [first]]


def test_mqadmin_query_msg_trace_by_id_reads_the_java_clients_trace(
    ours: Target, msg_id: str, timeline: dict[str, Any]
) -> None:
    out = ours.admin("queryMsgTraceById", "-i", msg_id)
    pub, sub = rows(out, "Pub"), rows(out, "Sub")
    assert len(pub) == 1 and len(sub) == 1, out
    assert pub[0][1] == PRODUCER_GROUP and pub[0][-1] == "success", out
    assert sub[0][1] == GROUP and sub[0][-1] == "success", out
    headers = rows(out, "#Type")
    assert [h[1] for h in headers] == ["#ProducerGroup", "#ConsumerGroup"], out


def test_rmq_message_trace_merges_client_and_broker_records(
    msg_id: str, timeline: dict[str, Any]
) -> None:
    assert timeline["msg_id"] == msg_id
    events = timeline["events"]
    types = [e["type"] for e in events]
    assert set(types) >= CLIENT_TYPES | BROKER_TYPES, types
    assert [e["time_ms"] for e in events] == sorted(e["time_ms"] for e in events)
    at = {e["type"]: e["time_ms"] for e in events}  # one host: one clock
    steps = ["Pub", "Stored", "Delivered", "SubBefore", "SubAfter"]
    assert [at[t] for t in steps] == sorted(at[t] for t in steps), at
    (pub,) = [e for e in events if e["type"] == "Pub"]
    assert pub["group"] == PRODUCER_GROUP and pub["status"] in ("success", "ok", True), pub
    subs = [e for e in events if e["type"] in ("SubBefore", "SubAfter")]
    assert {e["group"] for e in subs} == {GROUP}, subs
    (stored,) = [e for e in events if e["type"] == "Stored"]
    delivered = [e for e in events if e["type"] == "Delivered"]
    assert stored["queue_id"] >= 0 and stored["offset"] >= 0, stored
    assert {e["group"] for e in delivered} == {GROUP}, delivered
