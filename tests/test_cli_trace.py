"""``rmq message trace`` against a real broker process with broker tracing on.

The official Python client sends, receives, lets a delivery lapse early (a nack: its
invisible time cut to 1 s), receives again and acks; the timeline shows every step in
order. A message dead-lettered shows DLQ. A 4.x-format trace record sent over remoting to
RMQ_SYS_TRACE_TOPIC with the keys the Java client sets is found by QUERY_MESSAGE (what
``mqadmin queryMsgTraceById`` asks) and joins the timeline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from broker_core.protocol.property_codec import encode_text
from broker_core.protocol.trace import TRACE_TOPIC, TraceRecord, decode, encode
from broker_core.protocol.trace_runs import bucket_key
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.remoting_records import decode_stored
from tests.security.conftest import metrics_url
from tests.security.test_metrics import scrape, value
from tests.server.conftest import DEFAULT_CONFIG
from tests.server.test_pull_and_offsets import client_message

TRACE_WAIT_S = 20  # upper bound for the broker's trace thread to write what happened


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {k: dict(v) for k, v in DEFAULT_CONFIG.items()}
    config["broker"].update(trace_broker="all", trace_flush_interval_ms=50)
    proc = launch_broker(
        tmp_path_factory.mktemp("trace"),
        config=config,
        extra_args=[
            *("--remoting-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"),
            *("--log-level", "INFO"),
        ],
    )
    with RocketMQClient(proc.endpoint) as admin:
        admin.create_topic("tr-life", queues=2)
        admin.create_topic("tr-dlq", queues=1)
        admin.create_group("tr-dlq-g", max_retries=1, consume_from_where="first_offset")
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def remoting_address(proc: BrokerProcess) -> str:
    line = next(x for x in proc.output if "remoting (4.x clients) on" in x)
    return line.rsplit(" on ", 1)[1].strip()


@pytest.fixture(scope="module")
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    client = Producer(ClientConfiguration(broker.endpoint, Credentials()), ("tr-life", "tr-dlq"))
    client.startup()
    yield client
    client.shutdown()


@pytest.fixture
def consumer(broker: BrokerProcess) -> Iterator[Callable[[str, str], SimpleConsumer]]:
    started: list[SimpleConsumer] = []

    def make(group: str, topic: str) -> SimpleConsumer:
        c = SimpleConsumer(
            ClientConfiguration(broker.endpoint, Credentials()),
            group,
            {topic: FilterExpression()},
            await_duration=2,
        )
        c.startup()
        started.append(c)
        return c

    yield make
    for c in started:
        c.shutdown()


def receive_one(consumer: SimpleConsumer, invisible_s: int = 20) -> Any:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = consumer.receive(1, invisible_s)
        if got:
            return got[0]
    raise AssertionError("no message within 20 s")


def trace(broker: BrokerProcess, msg_id: str, *args: str) -> dict[str, Any]:
    argv = ["message", "trace", msg_id, "--json", "--endpoints", broker.endpoint, *args]
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def await_trace(broker: BrokerProcess, msg_id: str, last: str, count: int = 1) -> list[Any]:
    """The timeline once ``count`` events of type ``last`` are in it (the trace thread
    writes every 50 ms)."""
    deadline = time.monotonic() + TRACE_WAIT_S
    while True:
        events = trace(broker, msg_id)["events"]
        if sum(e["type"] == last for e in events) >= count or time.monotonic() > deadline:
            return events  # type: ignore[no-any-return]


def test_official_client_life_of_a_message(broker, producer, consumer) -> None:
    receipt = producer.send(client_message("tr-life", b"life"))
    c = consumer("tr-life-g", "tr-life")
    first = receive_one(c)
    assert first.delivery_attempt == 1
    c.change_invisible_duration(first, 1)  # a nack: visible again in 1 s
    second = receive_one(c)
    assert (second.message_id, second.delivery_attempt) == (receipt.message_id, 2)
    c.ack(second)
    answer = trace(broker, receipt.message_id)
    assert answer["msg_id"] == receipt.message_id
    events = await_trace(broker, receipt.message_id, "Ack")
    types = [e["type"] for e in events]
    assert types == ["Stored", "Delivered", "Nack", "Retry", "Delivered", "Ack"], events
    assert [e["time_ms"] for e in events] == sorted(e["time_ms"] for e in events)
    delivered = [e for e in events if e["type"] == "Delivered"]
    assert [d["attempt"] for d in delivered] == [1, 2]
    assert all(d["group"] == "tr-life-g" and d["client_id"] for d in delivered)
    stored = events[0]
    assert stored["topic"] == "tr-life" and stored["host"] and stored["cost_ms"] >= 0
    assert {"queue_id", "offset"} <= set(stored)
    assert events[-1]["group"] == "tr-life-g" and events[-1]["attempt"] == 2


def test_dead_lettered_message_shows_dlq(broker, producer, consumer) -> None:
    receipt = producer.send(client_message("tr-dlq", b"doomed"))
    c = consumer("tr-dlq-g", "tr-dlq")
    for attempt in (1, 2):  # max_retries=1: the second lapse dead-letters it
        got = receive_one(c)
        assert got.delivery_attempt == attempt
        c.change_invisible_duration(got, 1)
    events = await_trace(broker, receipt.message_id, "DLQ")
    types = [e["type"] for e in events]
    assert types[-1] == "DLQ" and types.count("Delivered") == 2, events
    assert events[-1]["group"] == "tr-dlq-g" and events[-1]["topic"] == "%DLQ%tr-dlq-g"


def send_v2(client: RemotingClient, topic: str, body: bytes, **props: str) -> RemotingCommand:
    fields = {"a": "PID_TRACE", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": encode_text(props),
              "j": "0", "k": "false"}  # fmt: skip
    return client.invoke(RemotingCommand.request(RC.SEND_MESSAGE_V2, fields, body), 5.0)


def query(key: str) -> dict[str, str]:
    return {"topic": TRACE_TOPIC, "key": key, "maxNum": "64", "beginTimestamp": "0",
            "endTimestamp": str(2**62)}  # fmt: skip


def test_a_4x_trace_record_joins_the_timeline(broker, producer) -> None:
    before = int(time.time() * 1000) - 1  # when the client began sending
    receipt = producer.send(client_message("tr-life", b"traced by a 4.x client", keys=["k-7"]))
    msg_id = receipt.message_id
    now = int(time.time() * 1000)
    pub = TraceRecord("Pub", before, "DefaultRegion", "PID_APP", "tr-life", msg_id, "", "k-7",
                      "127.0.0.1:10911", 22, 2, 0, "OFFSETID", True, "10.1.2.3")  # fmt: skip
    sub = TraceRecord("SubBefore", now + 50, "DefaultRegion", "CID_APP", msg_id=msg_id,
                      keys="k-7", request_id="r1", retry_times=0)  # fmt: skip
    after = TraceRecord("SubAfter", now + 60, msg_id=msg_id, keys="k-7", cost_ms=10,
                        request_id="r1", success=True)  # fmt: skip
    client = RemotingClient(remoting_address(broker), 5.0)
    try:  # as AsyncTraceDispatcher sends it: KEYS = the msg id and its keys
        for record in (pub, sub, after):
            sent = send_v2(client, TRACE_TOPIC, encode([record]).encode(), KEYS=f"{msg_id} k-7")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        deadline = time.monotonic() + TRACE_WAIT_S
        found: list[Any] = []
        while len(found) < 4 and time.monotonic() < deadline:  # 3 client + the broker's own
            found = [  # the clients' by the id, the broker's by the id's bucket
                m
                for key in (msg_id, bucket_key(msg_id))
                for m in decode_stored(
                    client.invoke(RemotingCommand.request(RC.QUERY_MESSAGE, query(key)), 5.0).body
                )
            ]
    finally:
        client.close()
    client_types = {r.type for m in found for r in decode(m["body"].decode())}
    assert {"Pub", "SubBefore", "SubAfter", "Stored"} <= client_types
    events = await_trace(broker, msg_id, "SubAfter")
    types = [e["type"] for e in events]
    assert types[:2] == ["Pub", "Stored"] and types[-2:] == ["SubBefore", "SubAfter"], events
    assert events[0]["host"] == "10.1.2.3" and events[0]["cost_ms"] == 2
    assert events[-1]["group"] == "CID_APP" and events[-1]["status"] == "success"
    assert [e["type"] for e in trace(broker, msg_id, "--topic", "other")["events"]] == [
        "SubBefore",
        "SubAfter",
    ]  # client records that name no topic stay; the rest are tr-life's


def test_unknown_message_has_no_events(broker) -> None:
    assert trace(broker, "NO-SUCH-ID")["events"] == []
    result = CliRunner().invoke(
        cli, ["message", "trace", "NO-SUCH-ID", "--endpoints", broker.endpoint]
    )
    assert result.exit_code == 1 and "no trace records" in result.output


assert Path  # used by fixtures' types


def test_what_the_trace_wrote_and_cost_is_in_metrics(broker, producer) -> None:
    """``/metrics`` counts the records written and the CPU the trace used, on the send
    path (the stored hook) and on its own thread."""
    before = scrape(metrics_url(broker))
    receipt = producer.send(client_message("tr-life", b"metered"))
    await_trace(broker, receipt.message_id, "Stored")
    after = scrape(metrics_url(broker))

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("rocketmq_trace_records_total") >= 1
    assert grew("rocketmq_trace_cpu_seconds_total", part="hook") > 0
    assert grew("rocketmq_trace_cpu_seconds_total", part="thread") > 0
    assert value(after, "rocketmq_trace_dropped_total") == 0


def test_a_bulk_batch_over_queues_is_traced_message_by_message(broker) -> None:
    """SendBulk's id-only batch (the ids read from its property rows, spread over the
    topic's queues in blocks): each message's Stored event names its own queue and
    offset."""
    with RocketMQClient(broker.endpoint) as client:
        receipts = client.send_batch("tr-life", [(b"bulk-%d" % i,) for i in range(40)])
        placed = {
            r.message_id: (client.query_message(message_id=r.message_id)[0]["queue_id"], r.offset)
            for r in receipts
        }
    assert len({queue for queue, _ in placed.values()}) == 2  # tr-life has two queues
    for msg_id in (receipts[0].message_id, receipts[19].message_id, receipts[-1].message_id):
        [stored] = [e for e in await_trace(broker, msg_id, "Stored") if e["type"] == "Stored"]
        assert (stored["queue_id"], stored["offset"]) == placed[msg_id], stored
        assert stored["topic"] == "tr-life" and stored["cost_ms"] >= 0
