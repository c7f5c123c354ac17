"""The PushConsumer's paths through the consumer RPCs, against a real broker process.

The raw-stub tests replay what the official PushConsumer sends (auto-renewed receives,
ChangeInvisibleDuration with its backoff after a failure); the official-client tests run
it: success, retries with the group's backoff into the DLQ, a FIFO group's
ForwardMessageToDeadLetterQueue, and groups sharing a topic. The groups' retry policies
(1 s backoff, at most 2 retries) are stored before the process starts.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    Producer,
    PushConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.broker.groups import GroupConfig
from broker_core.broker.retry import RetryPolicy
from broker_core.broker.topics import TopicConfig
from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, await_nothing_more, start_broker
from tests.server.test_pull_and_offsets import (
    client_message,
    mq,
    msg,
    prefill,
    pull,
    split_stream,
    wait_for,
)
from tests.server.test_simple_consumer import ack, change_invisible, receive

Code = pb.Code
RETRY_GROUP = "pc-retry-group"  # custom backoff 1s, at most 2 retries (3 deliveries)
OFFICIAL_RETRY_GROUP = "opc-retry-group"  # the same policy, for the official client
FIFO_GROUP = "opc-fifo-group"  # FIFO, the same policy
OFFICIAL_TOPICS = ("opc-ok", "opc-fail", "opc-fifo", "opc-share")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir: Path = tmp_path_factory.mktemp("push")
    prefill(
        workdir,
        [msg("pc-retry", b"always-fails"), msg("pc-ok", b"fine")],
        topics=[TopicConfig(t, 2, 2) for t in ("pc-retry", "pc-ok", *OFFICIAL_TOPICS)],
        groups=[
            GroupConfig(
                g, retry_policy=RetryPolicy.custom("1s", 2), consume_from_where="first_offset"
            )  # the prefilled ones too
            for g in (RETRY_GROUP, OFFICIAL_RETRY_GROUP)
        ]
        + [
            GroupConfig(
                FIFO_GROUP,
                fifo=True,
                retry_policy=RetryPolicy.custom("1s", 2),
                consume_from_where="first_offset",
            )
        ],
    )
    proc = start_broker(workdir)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def push_receive(stub: Any, topic: str, group: str, poll_ms: int) -> tuple[int, list[Any]]:
    """A receive as the PushConsumer sends it: auto_renew, no invisible duration."""
    responses = receive(
        stub,
        topic,
        group,
        invisible_ms=None,
        auto_renew=True,
        poll_ms=poll_ms,
        timeout_s=poll_ms / 1000 + 3,
    )
    statuses, messages, _ = split_stream(responses)
    return statuses[0].code, messages


def test_auto_renewed_receive_then_ack(stub) -> None:
    code, [m] = push_receive(stub, "pc-ok", "pc-ok-group", 1_000)
    assert code == Code.OK
    assert m.system_properties.invisible_duration.seconds == 60
    assert ack(stub, "pc-ok", "pc-ok-group", m).status.code == Code.OK


def test_failures_retry_with_the_backoff_then_go_to_the_dlq(stub) -> None:
    attempts, times = [], []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        code, messages = push_receive(stub, "pc-retry", RETRY_GROUP, 2_000)
        if code == Code.MESSAGE_NOT_FOUND and len(attempts) == 3:
            break
        for m in messages:  # the listener fails: nack with the 1 s backoff
            attempts.append(m.system_properties.delivery_attempt)
            times.append(time.monotonic())
            reply = change_invisible(
                stub, m.topic.name, RETRY_GROUP, m.system_properties.receipt_handle, 1_000
            )
            assert reply.status.code == Code.OK
    assert attempts == [1, 2, 3]
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))
    _, [dead], _ = split_stream(pull(stub, 0, topic=f"%DLQ%{RETRY_GROUP}", group="inspector"))
    assert dead.body == b"always-fails"
    assert dead.system_properties.dead_letter_queue.topic == "pc-retry"


# ---- the official PushConsumer ------------------------------------------------------------


class Recorder(MessageListener):
    """Records every delivery; answers ``result`` (thread-safe: lists append atomically)."""

    def __init__(self, result: ConsumeResult = ConsumeResult.SUCCESS) -> None:
        self.result = result
        self.deliveries: list[tuple[float, bytes, int, str]] = []

    def consume(self, message: Any) -> ConsumeResult:
        self.deliveries.append(
            (time.monotonic(), message.body, message.delivery_attempt, message.message_id)
        )
        return self.result

    def bodies(self) -> list[bytes]:
        return sorted(body for _, body, _, _ in self.deliveries)


@pytest.fixture(scope="module")
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    client = Producer(ClientConfiguration(broker.endpoint, Credentials()), OFFICIAL_TOPICS)
    client.startup()
    yield client
    client.shutdown()


@pytest.fixture
def push_consumers(broker: BrokerProcess) -> Iterator[Any]:
    """``make(group, topic, listener)`` → a started PushConsumer (shut down after the test)."""
    started: list[PushConsumer] = []

    def make(group: str, topic: str, listener: MessageListener) -> PushConsumer:
        consumer = PushConsumer(
            ClientConfiguration(broker.endpoint, Credentials()),
            group,
            listener,
            {topic: FilterExpression()},
        )
        consumer.startup()
        started.append(consumer)
        return consumer

    yield make
    for consumer in started:
        consumer.shutdown()


def committed_total(stub: Any, group: str, topic: str) -> int:
    """The group's committed offsets summed over the topic's queues."""
    requests = [
        service_pb2.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq(topic, q))
        for q in range(2)
    ]
    return sum(stub.GetOffset(r, timeout=5).offset for r in requests)


def test_official_push_consumer_consumes_and_acks(producer, push_consumers, stub) -> None:
    listener = Recorder()
    push_consumers("opc-ok-group", "opc-ok", listener)
    expected = sorted(f"ok-{i}".encode() for i in range(10))
    for body in expected:
        producer.send(client_message("opc-ok", body))
    wait_for(lambda: len(listener.deliveries) >= 10, 20, "10 deliveries")
    wait_for(lambda: committed_total(stub, "opc-ok-group", "opc-ok") == 10, 10, "all acked")
    assert listener.bodies() == expected
    assert {attempt for _, _, attempt, _ in listener.deliveries} == {1}


def test_official_push_failures_retry_with_backoff_then_dead_letter(
    producer, push_consumers, stub
) -> None:
    listener = Recorder(ConsumeResult.FAILURE)
    push_consumers(OFFICIAL_RETRY_GROUP, "opc-fail", listener)
    receipt = producer.send(client_message("opc-fail", b"poison"))
    wait_for(lambda: len(listener.deliveries) >= 3, 20, "three delivery attempts")
    dlq = f"%DLQ%{OFFICIAL_RETRY_GROUP}"
    wait_for(
        lambda: split_stream(pull(stub, 0, topic=dlq, group="inspector"))[1],
        10,
        "the message in the DLQ",
    )
    [dead] = split_stream(pull(stub, 0, topic=dlq, group="inspector"))[1]
    assert (dead.body, dead.system_properties.message_id) == (b"poison", receipt.message_id)
    times = [t for t, _, _, _ in listener.deliveries]
    assert [a for _, _, a, _ in listener.deliveries] == [1, 2, 3]  # max_retries = 2
    assert all(b - a >= 0.9 for a, b in itertools.pairwise(times))  # the 1 s backoff


def test_official_fifo_push_consumer_forwards_to_the_dlq(producer, push_consumers, stub) -> None:
    listener = Recorder(ConsumeResult.FAILURE)
    push_consumers(FIFO_GROUP, "opc-fifo", listener)
    message = client_message("opc-fifo", b"ordered-poison")
    message.message_group = "order-1"
    receipt = producer.send(message)
    dlq = f"%DLQ%{FIFO_GROUP}"
    wait_for(
        lambda: split_stream(pull(stub, 0, topic=dlq, group="inspector"))[1],
        20,
        "the FIFO message in the DLQ",
    )
    [dead] = split_stream(pull(stub, 0, topic=dlq, group="inspector"))[1]
    assert dead.system_properties.message_id == receipt.message_id
    assert dead.system_properties.message_group == "order-1"
    assert len(listener.deliveries) == 3  # the client retried locally, then gave up


def test_official_push_consumers_share_a_group_and_another_group_gets_all(
    broker, producer, push_consumers
) -> None:
    first, second, other = Recorder(), Recorder(), Recorder()
    push_consumers("opc-share-group", "opc-share", first)
    push_consumers("opc-share-group", "opc-share", second)
    push_consumers("opc-share-other", "opc-share", other)
    expected = sorted(f"s-{i}".encode() for i in range(30))
    for body in expected:
        producer.send(client_message("opc-share", body))
    wait_for(lambda: len(other.deliveries) >= 30, 20, "the other group's 30 deliveries")
    wait_for(
        lambda: len(first.deliveries) + len(second.deliveries) >= 30,
        20,
        "the shared group's 30 deliveries",
    )
    with RocketMQClient(broker.endpoint) as admin:  # a duplicate would have arrived by now
        await_nothing_more(admin, "opc-share-group")
        await_nothing_more(admin, "opc-share-other")
    assert sorted(first.bodies() + second.bodies()) == expected
    assert other.bodies() == expected
