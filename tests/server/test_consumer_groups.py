"""Consumer-group settings as the official clients see them, against a real broker process.

Broadcasting groups (every live client gets every message), offset resets reaching live
POP consumers, the group's consume-from setting on a first POP receive, and draining a
dead-letter topic with a SimpleConsumer. Every test has its own topic and groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, start_broker
from tests.server.test_pull_and_offsets import client_message

TOPICS = (
    "cg-bcast",
    "cg-reset",
    "cg-last",
    "cg-first",
    "cg-dead",
    "cg-bcast-reset",
    "cg-bcast-push",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("groups"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint) as client:
        for topic in TOPICS:
            client.create_topic(topic, queues=2)
        yield client


@pytest.fixture(scope="module")
def producer(broker: BrokerProcess, admin: RocketMQClient) -> Iterator[Producer]:
    client = Producer(ClientConfiguration(broker.endpoint, Credentials()), TOPICS)
    client.startup()
    yield client
    client.shutdown()


@pytest.fixture
def consumers(broker: BrokerProcess) -> Iterator[Any]:
    """``make(group, topic)`` → a started SimpleConsumer (shut down after the test)."""
    started: list[SimpleConsumer] = []

    def make(group: str, topic: str) -> SimpleConsumer:
        consumer = SimpleConsumer(
            ClientConfiguration(broker.endpoint, Credentials()),
            group,
            {topic: FilterExpression()},
            await_duration=1,
        )
        consumer.startup()
        started.append(consumer)
        return consumer

    yield make
    for consumer in started:
        consumer.shutdown()


def send(producer: Producer, topic: str, bodies: list[bytes]) -> None:
    for body in bodies:
        producer.send(client_message(topic, body))


def drain(
    consumer: SimpleConsumer,
    want: int,
    *,
    ack: bool = True,
    invisible_s: int = 20,
    timeout_s: float = 15,
) -> list[bytes]:
    """Receive until ``want`` messages came or ``timeout_s`` passed; acks each if asked."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for message in consumer.receive(32, invisible_s):
            got.append(message.body)
            if ack:
                consumer.ack(message)
    return got


def nothing_more(consumer: SimpleConsumer) -> list[bytes]:
    """What one more receive (a 1 s long poll) returns; [] when caught up."""
    return [m.body for m in consumer.receive(32, 20)]


def bodies(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


# ---- broadcasting ---------------------------------------------------------------------------


def test_broadcasting_group_delivers_every_message_to_every_client(
    admin, producer, consumers
) -> None:
    admin.create_group("cg-g-bcast", broadcast=True, consume_from_where="first_offset")
    expected = bodies("b", 20)
    send(producer, "cg-bcast", expected)
    first, second = consumers("cg-g-bcast", "cg-bcast"), consumers("cg-g-bcast", "cg-bcast")
    assert sorted(drain(first, 20)) == sorted(expected)
    assert sorted(drain(second, 20)) == sorted(expected)
    assert nothing_more(first) == [] and nothing_more(second) == []
    assert admin.group_progress("cg-g-bcast", "cg-bcast")["total_lag"] == 0
    send(producer, "cg-bcast", [b"late"])
    assert drain(first, 1) == [b"late"]
    assert admin.group_progress("cg-g-bcast", "cg-bcast")["total_lag"] == 1  # the slowest


class Recorder(MessageListener):
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def consume(self, message: Any) -> ConsumeResult:
        self.bodies.append(message.body)
        return ConsumeResult.SUCCESS


def test_broadcasting_push_consumers_each_get_everything(broker, admin, producer) -> None:
    admin.create_group("cg-g-bpush", broadcast=True, consume_from_where="first_offset")
    expected = bodies("p", 10)
    send(producer, "cg-bcast-push", expected)
    recorders = [Recorder(), Recorder()]
    pushers = [
        PushConsumer(
            ClientConfiguration(broker.endpoint, Credentials()),
            "cg-g-bpush",
            r,
            {"cg-bcast-push": FilterExpression()},
        )
        for r in recorders
    ]
    for consumer in pushers:
        consumer.startup()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(len(r.bodies) < 10 for r in recorders):
            time.sleep(0.1)
    finally:
        for consumer in pushers:
            consumer.shutdown()
    assert [sorted(r.bodies) for r in recorders] == [sorted(expected)] * 2


def test_broadcasting_client_redelivers_what_it_did_not_ack(admin, producer, consumers) -> None:
    admin.create_group("cg-g-bcast2", broadcast=True, consume_from_where="first_offset")
    send(producer, "cg-bcast-reset", [b"only"])
    first, second = (consumers("cg-g-bcast2", "cg-bcast-reset") for _ in range(2))
    assert drain(first, 1, ack=False, invisible_s=1) == [b"only"]
    assert drain(second, 1) == [b"only"]  # the other client's delivery is its own
    assert drain(first, 1) == [b"only"]  # again, once its invisible time ended
    assert nothing_more(second) == []


# ---- offset reset and consume-from ----------------------------------------------------------


def test_offset_reset_reaches_a_running_pop_consumer(admin, producer, consumers) -> None:
    expected = bodies("r", 6)
    send(producer, "cg-reset", expected)
    consumer = consumers("cg-g-reset", "cg-reset")
    assert sorted(drain(consumer, 6)) == sorted(expected)
    assert nothing_more(consumer) == []
    assert sum(admin.reset_offset("cg-g-reset", "cg-reset", "earliest").values()) == 0
    progress = admin.group_progress("cg-g-reset", "cg-reset")
    assert progress["total_lag"] == 6
    assert sorted(drain(consumer, 6)) == sorted(expected)  # without a restart
    assert admin.group_progress("cg-g-reset", "cg-reset")["total_lag"] == 0
    admin.reset_offset("cg-g-reset", "cg-reset", "latest")
    send(producer, "cg-reset", [b"new"])
    assert drain(consumer, 1) == [b"new"]


def test_reset_drops_deliveries_in_flight(admin, producer, consumers) -> None:
    send(producer, "cg-first", [b"held"])
    consumer = consumers("cg-g-inflight", "cg-first")
    [message] = consumer.receive(32, 30)  # in flight for 30 s
    admin.reset_offset("cg-g-inflight", "cg-first", "earliest")
    assert drain(consumer, 1) == [b"held"]  # visible again at once, from the reset offset
    with pytest.raises(Exception, match=r"(?i)receipt|handle|not in flight"):
        consumer.ack(message)  # the old delivery ended with the reset


def test_a_group_created_before_its_consumer_gets_what_was_sent_in_between(
    admin, producer, consumers
) -> None:
    """``last_offset`` (the default of ``rmq group create``) reads a queue whose first
    message is still in memory from 0, as RocketMQ's POP does
    (``initPopOffsetByCheckMsgInMem``): the messages sent before the first consumer."""
    admin.create_group("cg-g-last", consume_from_where="last_offset")
    sent = bodies("old", 4)
    send(producer, "cg-last", sent)
    consumer = consumers("cg-g-last", "cg-last")
    assert sorted(drain(consumer, 4)) == sorted(sent)
    send(producer, "cg-last", [b"new"])
    assert drain(consumer, 1) == [b"new"]
    assert nothing_more(consumer) == []


def test_pop_honours_first_offset_and_auto_created_groups_start_at_the_first(
    admin, producer, consumers
) -> None:
    expected = bodies("f", 3)
    send(producer, "cg-first", expected)
    admin.create_group("cg-g-first", consume_from_where="first_offset")
    for group in ("cg-g-first", "cg-g-auto"):
        got = drain(consumers(group, "cg-first"), 4, timeout_s=4)
        assert set(expected) <= set(got), group


# ---- dead letters ---------------------------------------------------------------------------


def test_a_consumer_of_a_dead_letter_topic_receives_and_acks(admin, producer, consumers) -> None:
    admin.create_group("cg-g-dying", max_retries=0, consume_from_where="first_offset")
    send(producer, "cg-dead", [b"doomed"])
    dying = consumers("cg-g-dying", "cg-dead")
    assert drain(dying, 1, ack=False, invisible_s=1) == [b"doomed"]
    drainer = consumers("cg-g-drain", "%DLQ%cg-g-dying")
    got = drain(drainer, 1, timeout_s=20)  # acks: must not be refused
    assert got == [b"doomed"]
    assert nothing_more(drainer) == []  # acked for good: not redelivered
    [row] = admin.group_progress("cg-g-drain")["queues"]  # the drained DLQ shows
    assert (row["topic"], row["lag"]) == ("%DLQ%cg-g-dying", 0)
