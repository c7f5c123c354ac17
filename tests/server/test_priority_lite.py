"""Priority messages and lite topics through the official Python client (a real broker).

Priority: ``Message.priority`` routes to queue ``min(p, queues - 1)``; a PRIORITY topic's
receive takes the highest queue first. Lite: a LITE parent topic, ``Message.lite_topic``,
LiteSimpleConsumer / LitePushConsumer with ``subscribe_lite`` — a consumer gets only the
lite topics it subscribed to, each in send order, redelivered in place when not acked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    LitePushConsumer,
    LiteSimpleConsumer,
    Message,
    MessageListener,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, await_nothing_more

TIMEOUT_S = 10


@pytest.fixture(scope="module")
def topics(broker_process: BrokerProcess) -> BrokerProcess:
    with RocketMQClient(broker_process.endpoint) as admin:
        admin.create_topic("prio", queues=4, message_type="PRIORITY")
        admin.create_topic("lite-parent", queues=2, message_type="LITE")
        admin.create_topic("plain-parent", queues=2)
    return broker_process


def _config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(), request_timeout=10)


@pytest.fixture(scope="module")
def producer(topics: BrokerProcess) -> Iterator[Producer]:
    client = Producer(_config(topics), ("prio", "lite-parent"))
    client.startup()
    yield client
    client.shutdown()


def _message(topic: str, body: str, **fields: Any) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def _receive_all(consumer: Any, want: int, deadline_s: float = TIMEOUT_S) -> list[Any]:
    got: list[Any] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        batch = consumer.receive(want - len(got), 15) or []
        for m in batch:
            consumer.ack(m)
        got += batch
    return got


def test_priority_picks_the_queue_and_the_highest_is_received_first(producer, topics) -> None:
    sent = {}
    for priority in (0, 2, 1, 3, 7, 0, 2):  # 7 lands in the top queue (3)
        receipt = producer.send(_message("prio", f"p{priority}", priority=priority))
        sent.setdefault(priority, []).append(receipt.message_id)
    consumer = SimpleConsumer(_config(topics), "prio-group", {"prio": FilterExpression()}, 1)
    consumer.startup()
    try:
        got = _receive_all(consumer, 7)
    finally:
        consumer.shutdown()
    bodies = [m.body.decode() for m in got]
    # queue 3 holds p3 and p7 (send order), then queue 2, 1, 0; each queue in send order
    assert bodies == ["p3", "p7", "p2", "p2", "p1", "p0", "p0"], bodies
    assert {m.priority for m in got if m.body == b"p7"} == {7}
    assert all(m.message_type == pb.MessageType.PRIORITY for m in got)


def _lite_simple(topics: BrokerProcess, group: str) -> LiteSimpleConsumer:
    consumer = LiteSimpleConsumer("lite-parent", _config(topics), group, 1)
    consumer.startup()
    # the client's startup does not wait for the server's settings (which carry the lite
    # subscription quota) for a LiteSimpleConsumer; subscribe_lite fails until they came
    assert consumer._init_settings_event.wait(TIMEOUT_S)
    return consumer


def _subscribe(consumer: Any, *lite_topics: str) -> None:
    """``subscribe_lite`` each, then ``subscribe_lite_all``.

    The installed client's ``subscribe_lite`` sends ``lite_topic_set.extend(name)`` with a
    str, i.e. one entry per *character* of the name (PARTIAL_ADD); only its periodic (30 s)
    or explicit ``subscribe_lite_all`` sends the real set (COMPLETE_ADD), which replaces
    the client's set on the broker. The broker takes each request as sent.
    """
    for name in lite_topics:
        consumer.subscribe_lite(name)
    consumer.subscribe_lite_all()


def test_lite_simple_consumer_gets_only_its_lite_topics_in_order(producer, topics) -> None:
    for i in range(6):
        producer.send(_message("lite-parent", f"a{i}", lite_topic="lite-a"))
        producer.send(_message("lite-parent", f"b{i}", lite_topic="lite-b"))
    consumer = _lite_simple(topics, "lite-g1")
    try:
        _subscribe(consumer, "lite-a")  # sent before the subscription: still delivered
        got = _receive_all(consumer, 6)
        assert [m.body.decode() for m in got] == [f"a{i}" for i in range(6)]
        assert {m.lite_topic for m in got} == {"lite-a"} and {m.topic for m in got} == {
            "lite-parent"
        }
        assert consumer.receive(16, 15) == []  # lite-b is not subscribed
        _subscribe(consumer, "lite-b")
        consumer.unsubscribe_lite("lite-a")  # sends {"lite-a"}: PARTIAL_REMOVE is right
        producer.send(_message("lite-parent", "a-late", lite_topic="lite-a"))
        got = _receive_all(consumer, 6)
        assert [m.body.decode() for m in got] == [f"b{i}" for i in range(6)]
    finally:
        consumer.shutdown()


def test_lite_message_not_acked_comes_back_before_the_next(producer, topics) -> None:
    for i in range(3):
        producer.send(_message("lite-parent", f"r{i}", lite_topic="lite-r"))
    consumer = _lite_simple(topics, "lite-g2")
    try:
        _subscribe(consumer, "lite-r")
        first = consumer.receive(1, 2)
        assert [m.body for m in first] == [b"r0"]
        assert consumer.receive(16, 2) == []  # r1 waits while r0 is in flight
        end = time.monotonic() + TIMEOUT_S
        again: list[Any] = []
        while not again and time.monotonic() < end:
            again = consumer.receive(1, 15)
        assert [m.body for m in again] == [b"r0"] and again[0].delivery_attempt == 2
        consumer.ack(again[0])
        assert [m.body.decode() for m in _receive_all(consumer, 2)] == ["r1", "r2"]
    finally:
        consumer.shutdown()


class _Collect(MessageListener):
    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.done = threading.Event()
        self.want = 0

    def consume(self, message: Any) -> ConsumeResult:
        self.bodies.append(message.body.decode())
        if len(self.bodies) >= self.want:
            self.done.set()
        return ConsumeResult.SUCCESS


def test_lite_push_consumer_receives_its_subscribed_lite_topics(producer, topics) -> None:
    listener = _Collect()
    listener.want = 8
    consumer = LitePushConsumer(_config(topics), "lite-push", "lite-parent", listener)
    consumer.startup()
    try:
        _subscribe(consumer, *(f"push-{n}" for n in range(4)))
        for i in range(2):
            for n in range(5):  # push-4 is not subscribed
                producer.send(_message("lite-parent", f"{n}-{i}", lite_topic=f"push-{n}"))
        assert listener.done.wait(TIMEOUT_S), listener.bodies
        # push-4 is not subscribed: its two messages are there for a group that wants
        # them (so dispatched), yet the broker has nothing more for lite-push
        other = _lite_simple(topics, "lite-push-4")
        try:
            _subscribe(other, "push-4")
            assert sorted(m.body for m in _receive_all(other, 2)) == [b"4-0", b"4-1"]
        finally:
            other.shutdown()
        with RocketMQClient(topics.endpoint) as admin:
            await_nothing_more(admin, "lite-push")
        assert sorted(listener.bodies) == sorted(f"{n}-{i}" for n in range(4) for i in range(2))
        for n in range(4):
            mine = [b for b in listener.bodies if b.startswith(f"{n}-")]
            assert mine == [f"{n}-0", f"{n}-1"]
    finally:
        consumer.shutdown()


def _sync(
    broker: BrokerProcess, topic: str, lites: list[str], client_id: str | None = "raw-lite"
) -> Any:
    request = service_pb2.SyncLiteSubscriptionRequest(
        action=pb.LiteSubscriptionAction.PARTIAL_ADD,
        topic=pb.Resource(name=topic),
        group=pb.Resource(name="raw-lite-g"),
        lite_topic_set=lites,
    )
    metadata = [("x-mq-client-id", client_id)] if client_id else []
    with grpc.insecure_channel(broker.endpoint) as channel:
        return (
            service_pb2_grpc.MessagingServiceStub(channel)
            .SyncLiteSubscription(request, metadata=metadata, timeout=TIMEOUT_S)
            .status
        )


def test_bad_lite_subscriptions_get_clear_codes(topics) -> None:
    assert _sync(topics, "lite-parent", ["ok-1"]).code == pb.Code.OK
    status = _sync(topics, "plain-parent", ["x"])
    assert status.code == pb.Code.BAD_REQUEST and "LITE topic" in status.message
    assert _sync(topics, "lite-parent", ["a b"]).code == pb.Code.ILLEGAL_LITE_TOPIC
    assert _sync(topics, "lite-parent", ["x" * 65]).code == pb.Code.ILLEGAL_LITE_TOPIC
    assert _sync(topics, "no-such-parent", ["x"]).code == pb.Code.TOPIC_NOT_FOUND
    assert _sync(topics, "lite-parent", ["x"], client_id=None).code == pb.Code.BAD_REQUEST
    status = _sync(topics, "lite-parent", [f"q{i}" for i in range(1_001)])
    assert status.code == pb.Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED


def test_lite_message_needs_a_lite_parent(producer, topics) -> None:
    mixed = Producer(_config(topics), ("plain-parent",))
    mixed.startup()
    try:
        with pytest.raises(Exception, match=r"LITE|message type"):
            mixed.send(_message("plain-parent", "x", lite_topic="l"))
    finally:
        mixed.shutdown()
