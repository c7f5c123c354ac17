"""POP consumption (ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageTo-
DeadLetterQueue) against a real broker process.

The first tests speak raw gRPC stubs to topics filled before the process starts, which
lets them send malformed requests and check every field of the stream; the last ones run
the official Producer and SimpleConsumer. Every test has its own topic and group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import FilterType, service_pb2, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.v5.exception import BadRequestException

from broker_core.broker.groups import GroupConfig
from broker_core.broker.topics import TopicConfig
from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, await_parked_receive, start_broker
from tests.server.test_pull_and_offsets import (
    client_message,
    mq,
    msg,
    prefill,
    pull,
    split_stream,
    sql_filter,
    tag_filter,
)

Code = pb.Code

TOPICS = {  # topic -> number of messages stored before start (bodies "<topic>-<i>")
    "sc-basic": 5,
    "sc-redeliver": 1,
    "sc-change": 1,
    "sc-stale": 2,
    "sc-garbage": 0,
    "sc-empty": 0,
    "sc-share": 40,
    "sc-tags": 6,
    "sc-sql": 6,
    "sc-dlq": 1,
    # filled by the official producer during the tests
    "osc-basic": 0,
    "osc-redeliver": 0,
    "osc-filter": 0,
    "osc-share": 0,
    "osc-leave": 0,
}


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir: Path = tmp_path_factory.mktemp("simple")
    messages = []
    for topic, count in TOPICS.items():
        for i in range(count):
            tag = "A" if i % 2 == 0 else "B"
            messages.append(msg(topic, f"{topic}-{i}".encode(), tag=tag, n=str(i)))
    prefill(
        workdir,
        messages,
        topics=[TopicConfig(t, 2, 2) for t in TOPICS],
        groups=[GroupConfig("g-garbage")],
    )  # acks need an existing group
    proc = start_broker(workdir)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def receive(
    stub: Any,
    topic: str,
    group: str,
    *,
    batch: int = 32,
    poll_ms: int = 0,
    invisible_ms: int | None = 30_000,
    flt: pb.FilterExpression | None = None,
    timeout_s: float = 10,
    auto_renew: bool = False,
) -> list[Any]:
    """The whole ReceiveMessage stream."""
    request = service_pb2.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=mq(topic, 0),
        batch_size=batch,
        filter_expression=flt,
        long_polling_timeout=duration(poll_ms),
        auto_renew=auto_renew,
    )
    if invisible_ms is not None:
        request.invisible_duration.CopyFrom(duration(invisible_ms))
    return list(stub.ReceiveMessage(request, timeout=timeout_s))


def received(stub: Any, topic: str, group: str, **kw: Any) -> list[Any]:
    """Just the messages of a receive that must succeed."""
    statuses, messages, _ = split_stream(receive(stub, topic, group, **kw))
    assert [s.code for s in statuses] == [Code.OK], statuses
    return messages


def ack_entry(m: Any) -> service_pb2.AckMessageEntry:
    """The ack entry of a received message, or of a bare receipt handle string."""
    if isinstance(m, str):
        return service_pb2.AckMessageEntry(message_id="none", receipt_handle=m)
    sp = m.system_properties
    return service_pb2.AckMessageEntry(message_id=sp.message_id, receipt_handle=sp.receipt_handle)


def ack(stub: Any, topic: str, group: str, *messages_or_handles: Any) -> Any:
    request = service_pb2.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[ack_entry(m) for m in messages_or_handles],
    )
    return stub.AckMessage(request, timeout=5)


def change_invisible(stub: Any, topic: str, group: str, handle: str, invisible_ms: int) -> Any:
    request = service_pb2.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        receipt_handle=handle,
        invisible_duration=duration(invisible_ms),
    )
    return stub.ChangeInvisibleDuration(request, timeout=5)


# ---- receive and ack ----------------------------------------------------------------------


def test_receive_streams_status_messages_then_delivery_timestamp(stub) -> None:
    responses = receive(stub, "sc-basic", "g-basic", invisible_ms=15_000)
    kinds = [r.WhichOneof("content") for r in responses]
    assert kinds == ["status"] + ["message"] * 5 + ["delivery_timestamp"]
    _, messages, [delivered_at] = split_stream(responses)
    assert sorted(m.body for m in messages) == [f"sc-basic-{i}".encode() for i in range(5)]
    for m in messages:
        sp = m.system_properties
        assert m.topic.name == "sc-basic"
        assert sp.receipt_handle and sp.delivery_attempt == 1
        assert sp.invisible_duration.seconds == 15
        assert dict(m.user_properties) == {"n": m.body.decode().rsplit("-", 1)[1]}
    assert delivered_at.seconds >= int(time.time()) - 60
    reply = ack(stub, "sc-basic", "g-basic", *messages)
    assert reply.status.code == Code.OK
    assert [e.status.code for e in reply.entries] == [Code.OK] * 5
    statuses, again, _ = split_stream(receive(stub, "sc-basic", "g-basic"))
    assert [s.code for s in statuses] == [Code.MESSAGE_NOT_FOUND] and again == []


def test_empty_receive_long_polls_and_answers_before_the_deadline(stub) -> None:
    started = time.monotonic()
    responses = receive(stub, "sc-empty", "g-empty", poll_ms=30_000, timeout_s=2.5)
    elapsed_s = time.monotonic() - started
    assert [r.WhichOneof("content") for r in responses] == ["status", "delivery_timestamp"]
    assert responses[0].status.code == Code.MESSAGE_NOT_FOUND
    assert 0.5 < elapsed_s < 2.5


def test_unacked_message_is_redelivered_after_its_invisible_time(stub) -> None:
    [first] = received(stub, "sc-redeliver", "g-redeliver", invisible_ms=1_000)
    assert first.system_properties.delivery_attempt == 1
    [second] = received(stub, "sc-redeliver", "g-redeliver", poll_ms=8_000, timeout_s=10)
    assert second.system_properties.message_id == first.system_properties.message_id
    assert second.system_properties.delivery_attempt == 2
    assert second.topic.name == "sc-redeliver"  # a retry copy shows its original topic
    assert ack(stub, "sc-redeliver", "g-redeliver", second).status.code == Code.OK
    stale = ack(stub, "sc-redeliver", "g-redeliver", first)
    assert stale.status.code == Code.INVALID_RECEIPT_HANDLE


def test_change_invisible_duration_issues_a_new_handle(stub) -> None:
    [m] = received(stub, "sc-change", "g-change", invisible_ms=1_000)
    old = m.system_properties.receipt_handle
    reply = change_invisible(stub, "sc-change", "g-change", old, 20_000)
    assert reply.status.code == Code.OK and reply.receipt_handle not in ("", old)
    # a 3 s long poll spans the first (1 s) invisible time: the extension must hold
    statuses, _, _ = split_stream(receive(stub, "sc-change", "g-change", poll_ms=3_000))
    assert [s.code for s in statuses] == [Code.MESSAGE_NOT_FOUND]
    assert ack(stub, "sc-change", "g-change", old).status.code == Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, "sc-change", "g-change", reply.receipt_handle).status.code == Code.OK


def test_ack_twice_and_mixed_entries(stub) -> None:
    a, b = received(stub, "sc-stale", "g-stale")
    assert ack(stub, "sc-stale", "g-stale", a).status.code == Code.OK
    again = ack(stub, "sc-stale", "g-stale", a)
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE
    assert again.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    mixed = ack(stub, "sc-stale", "g-stale", a, b)
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [Code.INVALID_RECEIPT_HANDLE, Code.OK]


@pytest.mark.parametrize("handle", ["garbage", "", "A" * 5000, "AQAAAAAAAAAAAAAAAAAAAAAA"])
def test_garbage_receipt_handles_are_invalid(stub, handle) -> None:
    reply = ack(stub, "sc-garbage", "g-garbage", handle)
    assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
    assert reply.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    change = change_invisible(stub, "sc-garbage", "g-garbage", handle, 1_000)
    assert change.status.code == Code.INVALID_RECEIPT_HANDLE


# ---- sharing ------------------------------------------------------------------------------


def test_consumers_of_one_group_share_while_another_group_gets_everything(stub) -> None:
    expected = sorted(f"sc-share-{i}".encode() for i in range(TOPICS["sc-share"]))
    got: dict[str, list[bytes]] = {"c1": [], "c2": []}

    def consume(name: str) -> None:
        while True:
            statuses, messages, _ = split_stream(
                receive(stub, "sc-share", "g-share", batch=3, poll_ms=300)
            )
            if statuses[0].code == Code.MESSAGE_NOT_FOUND:
                return
            got[name] += [m.body for m in messages]
            assert ack(stub, "sc-share", "g-share", *messages).status.code == Code.OK

    threads = [threading.Thread(target=consume, args=(n,)) for n in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(got["c1"] + got["c2"]) == expected  # each message exactly once
    other = received(stub, "sc-share", "g-share-2", batch=64)
    assert sorted(m.body for m in other) == expected


# ---- filters ------------------------------------------------------------------------------


def test_receive_with_tag_filter(stub) -> None:
    messages = received(stub, "sc-tags", "g-tags", flt=tag_filter("B"))
    assert sorted(m.body for m in messages) == [b"sc-tags-1", b"sc-tags-3", b"sc-tags-5"]
    assert {m.system_properties.tag for m in messages} == {"B"}


def test_receive_with_sql_filter(stub) -> None:
    messages = received(stub, "sc-sql", "g-sql", flt=sql_filter("n >= 2 AND TAGS = 'A'"))
    assert sorted(m.body for m in messages) == [b"sc-sql-2", b"sc-sql-4"]


# ---- dead letters -------------------------------------------------------------------------


def test_forward_to_dead_letter_queue(stub) -> None:
    [m] = received(stub, "sc-dlq", "sc-dlq-group")
    request = service_pb2.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="sc-dlq-group"),
        topic=pb.Resource(name="sc-dlq"),
        receipt_handle=m.system_properties.receipt_handle,
        message_id=m.system_properties.message_id,
        delivery_attempt=1,
        max_delivery_attempts=3,
    )
    assert stub.ForwardMessageToDeadLetterQueue(request, timeout=5).status.code == Code.OK
    again = stub.ForwardMessageToDeadLetterQueue(request, timeout=5)
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE
    _, [dead], _ = split_stream(pull(stub, 0, topic="%DLQ%sc-dlq-group", group="inspector"))
    assert dead.body == b"sc-dlq-0"
    assert dead.system_properties.message_id == m.system_properties.message_id
    assert dead.system_properties.dead_letter_queue.topic == "sc-dlq"


# ---- bad requests -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"topic": "no-such-topic"}, Code.TOPIC_NOT_FOUND),
        ({"topic": "bad topic"}, Code.ILLEGAL_TOPIC),
        ({"group": ""}, Code.ILLEGAL_CONSUMER_GROUP),
        ({"flt": tag_filter("||")}, Code.ILLEGAL_FILTER_EXPRESSION),
        ({"flt": sql_filter("a >")}, Code.ILLEGAL_FILTER_EXPRESSION),
        ({"invisible_ms": None}, Code.BAD_REQUEST),
        ({"invisible_ms": 0}, Code.BAD_REQUEST),
        ({"invisible_ms": 2 * 24 * 3_600_000}, Code.ILLEGAL_INVISIBLE_TIME),  # over 12 h
        ({"batch": 0}, Code.BAD_REQUEST),
    ],
)
def test_bad_receive_requests_get_their_code(stub, kwargs, code) -> None:
    args = {"topic": "sc-empty", "group": "g-bad", **kwargs}
    [response] = receive(stub, args.pop("topic"), args.pop("group"), **args)
    assert response.status.code == code, response.status.message


def test_auto_renew_without_invisible_duration_is_accepted(stub) -> None:
    statuses, _, _ = split_stream(
        receive(stub, "sc-empty", "g-renew", invisible_ms=None, auto_renew=True)
    )
    assert [s.code for s in statuses] == [Code.MESSAGE_NOT_FOUND]


def test_acks_name_an_existing_group_and_topic(stub) -> None:
    assert ack(stub, "sc-basic", "never-seen-group", "x").status.code == (
        Code.CONSUMER_GROUP_NOT_FOUND
    )
    assert ack(stub, "no-such-topic", "g-garbage", "x").status.code == Code.TOPIC_NOT_FOUND
    empty = service_pb2.AckMessageRequest(
        group=pb.Resource(name="g-garbage"), topic=pb.Resource(name="sc-basic")
    )
    assert stub.AckMessage(empty, timeout=5).status.code == Code.BAD_REQUEST
    missing = service_pb2.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="g-garbage"), topic=pb.Resource(name="sc-basic"), receipt_handle="x"
    )
    assert stub.ChangeInvisibleDuration(missing, timeout=5).status.code == Code.BAD_REQUEST


# ---- the official SimpleConsumer --------------------------------------------------------


@pytest.fixture(scope="module")
def producer(broker: BrokerProcess) -> Iterator[Producer]:
    topics = tuple(t for t in TOPICS if t.startswith("osc-"))
    client = Producer(ClientConfiguration(broker.endpoint, Credentials()), topics)
    client.startup()
    yield client
    client.shutdown()


@pytest.fixture
def consumers(broker: BrokerProcess) -> Iterator[Any]:
    """``make(group, topic, filter=None, await_s=2)`` → a started SimpleConsumer."""
    started: list[SimpleConsumer] = []

    def make(
        group: str, topic: str, flt: FilterExpression | None = None, await_s: int = 2
    ) -> SimpleConsumer:
        consumer = SimpleConsumer(
            ClientConfiguration(broker.endpoint, Credentials()),
            group,
            {topic: flt or FilterExpression()},
            await_duration=await_s,
        )
        consumer.startup()
        started.append(consumer)
        return consumer

    yield make
    for consumer in started:
        consumer.shutdown()


def receive_all(
    consumer: SimpleConsumer, count: int, invisible_s: int = 20, timeout_s: float = 15
) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.receive(16, invisible_s)
    return got


def test_official_simple_consumer_receive_and_ack(producer, consumers) -> None:
    receipts = [
        producer.send(
            client_message("osc-basic", f"b{i}".encode(), tag="T", keys=[f"k{i}"], n=str(i))
        )
        for i in range(3)
    ]
    consumer = consumers("osc-g-basic", "osc-basic")
    got = sorted(receive_all(consumer, 3), key=lambda m: m.body)
    assert [m.body for m in got] == [b"b0", b"b1", b"b2"]
    assert [m.message_id for m in got] == [r.message_id for r in receipts]
    for i, m in enumerate(got):
        assert (m.tag, m.keys, m.properties) == ("T", {f"k{i}"}, {"n": str(i)})
        assert (m.topic, m.delivery_attempt, m.corrupted) == ("osc-basic", 1, False)
        consumer.ack(m)
    assert consumer.receive(16, 20) == []


def test_official_redelivery_change_invisible_and_ack(producer, consumers) -> None:
    receipt = producer.send(client_message("osc-redeliver", b"again"))
    consumer = consumers("osc-g-redeliver", "osc-redeliver", await_s=2)
    [first] = receive_all(consumer, 1, invisible_s=1)
    assert (first.message_id, first.delivery_attempt) == (receipt.message_id, 1)
    [second] = consumer.receive(16, 1)  # after the 1 s invisible time
    assert (second.message_id, second.delivery_attempt) == (receipt.message_id, 2)
    consumer.change_invisible_duration(second, 30)
    assert consumer.receive(16, 20) == []  # a 2 s poll: past the old 1 s deadline, held
    consumer.ack(second)  # with the handle ChangeInvisibleDuration returned
    with pytest.raises(BadRequestException) as stale:
        consumer.ack(first)
    assert stale.value.code == Code.INVALID_RECEIPT_HANDLE
    assert consumer.receive(16, 20) == []


def test_official_tag_and_sql_filters(producer, consumers) -> None:
    for i in range(6):
        producer.send(
            client_message("osc-filter", f"f{i}".encode(), tag="A" if i % 2 else "B", n=str(i))
        )
    tags = consumers("osc-g-tag", "osc-filter", FilterExpression("A"))
    sql = consumers(
        "osc-g-sql", "osc-filter", FilterExpression("n > 2 AND TAGS = 'B'", FilterType.SQL)
    )
    assert sorted(m.body for m in receive_all(tags, 3)) == [b"f1", b"f3", b"f5"]
    assert [m.body for m in receive_all(sql, 1)] == [b"f4"]
    assert tags.receive(16, 20) == [] and sql.receive(16, 20) == []


def test_official_consumers_of_one_group_share_and_another_group_gets_all(
    producer, consumers
) -> None:
    expected = sorted(f"s{i}".encode() for i in range(20))
    for body in expected:
        producer.send(client_message("osc-share", body))
    first, second = consumers("osc-g-share", "osc-share"), consumers("osc-g-share", "osc-share")
    got: dict[int, list[bytes]] = {0: [], 1: []}

    def drain(index: int, consumer: SimpleConsumer) -> None:
        while batch := consumer.receive(4, 20):
            for m in batch:
                got[index].append(m.body)
                consumer.ack(m)

    threads = [threading.Thread(target=drain, args=item) for item in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(got[0] + got[1]) == expected  # each exactly once within the group
    other = consumers("osc-g-share-2", "osc-share")
    assert sorted(m.body for m in receive_all(other, 20)) == expected


def test_client_leaving_during_the_long_poll_gets_its_message_released(
    broker, producer, stub
) -> None:
    """A receive whose client gave up does not keep a message invisible for 60 s."""
    request = service_pb2.ReceiveMessageRequest(
        group=pb.Resource(name="osc-g-leave"),
        message_queue=mq("osc-leave"),
        batch_size=1,
        invisible_duration=duration(60_000),
        long_polling_timeout=duration(8_000),
    )
    call = stub.ReceiveMessage(request, timeout=10)
    with RocketMQClient(broker.endpoint) as admin:
        await_parked_receive(admin, "osc-g-leave")  # the broker holds the poll now
    call.cancel()
    receipt = producer.send(client_message("osc-leave", b"not lost"))
    [m] = received(stub, "osc-leave", "osc-g-leave", poll_ms=6_000, timeout_s=8)
    assert m.system_properties.message_id == receipt.message_id
