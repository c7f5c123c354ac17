"""Bad input gets a clear error: the official client, our client, raw gRPC, Spark options.

The raw-gRPC codes of single bad requests are covered in ``tests/server`` (bad messages,
bad receives, garbage receipt handles, bad offsets). What this module adds:

* the same mistakes through the official ``rocketmq`` client and ours: an oversized body
  (the broker's limit reaches the official producer through its settings), an illegal or
  unknown topic, an unknown group with auto-creation off, a stale receipt handle;
* forged receipt handles (checksum right, fields hostile) against ack, change-invisible
  and dead-letter: always INVALID_RECEIPT_HANDLE or another proper code, never a wrong ack;
* the Spark source and sink options fuzzed without Spark: every bad value is a
  ConfigError naming its option, never another exception.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc
from rocketmq.v5.exception import BadRequestException, IllegalArgumentException, NotFoundException

from broker_core.broker.pop.receipt import ReceiptHandle, decode_handle
from broker_core.client import RocketMQClient
from broker_core.errors import (
    ConfigError,
    GroupNotFoundError,
    InvalidTopicError,
    MessageTooLargeError,
    TopicNotFoundError,
)
from broker_core.server.launcher import BrokerProcess
from connector.options import KNOWN_OPTIONS, parse_read_options
from connector.sink_options import SINK_OPTIONS, parse_sink_options
from tests.chaos import load
from tests.server.conftest import start_broker

Code = pb.Code
MAX_BODY_BYTES = 64 << 10
TOPIC, GROUP, UNKNOWN_GROUP = "bi-orders", "bi-group", "bi-never-created"
CLIENT_ID = "bad-input@1"


def budgets(short: int, full: int) -> list[Any]:
    return load.budgets(short, full, suppress=list(HealthCheck))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(
        tmp_path_factory.mktemp("bad-input"),
        config={
            "broker": {"auto_create_topics": False, "auto_create_groups": False},
            "store": {"max_body_bytes": MAX_BODY_BYTES},
        },
    )
    with RocketMQClient(proc.endpoint) as client:
        client.create_topic(TOPIC, queues=2)
        client.create_group(GROUP, consume_from_where="first_offset")  # POP reads the 8 below
        client.send_batch(TOPIC, [f"m{i}".encode() for i in range(8)])
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-30:])


@pytest.fixture(scope="module")
def config(broker: BrokerProcess) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials())


def client_message(topic: str, body: bytes) -> ClientMessage:
    msg = ClientMessage()
    msg.topic, msg.body = topic, body
    return msg


# ---- the official client ------------------------------------------------------------------


def test_official_producer_gets_the_broker_body_limit(config: ClientConfiguration) -> None:
    producer = Producer(config, (TOPIC,))
    producer.startup()
    try:
        with pytest.raises(IllegalArgumentException, match=f"max size={MAX_BODY_BYTES} bytes"):
            producer.send(client_message(TOPIC, bytes(MAX_BODY_BYTES + 1)))
        assert producer.send(client_message(TOPIC, bytes(MAX_BODY_BYTES))).message_id
        with pytest.raises(IllegalArgumentException, match="topic"):
            producer.send(client_message("bad topic!", b"x"))
        with pytest.raises(Exception, match="no-such-topic"):  # no route: auto-create is off
            producer.send(client_message("no-such-topic", b"x"))
    finally:
        producer.shutdown()


def test_official_consumer_of_an_unknown_group(config: ClientConfiguration) -> None:
    consumer = SimpleConsumer(config, UNKNOWN_GROUP, {TOPIC: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        with pytest.raises(NotFoundException, match=UNKNOWN_GROUP) as refused:
            consumer.receive(4, 10)
        assert refused.value.code == Code.CONSUMER_GROUP_NOT_FOUND
    finally:
        consumer.shutdown()


def test_official_consumer_acks_a_stale_handle(config: ClientConfiguration) -> None:
    consumer = SimpleConsumer(config, GROUP, {TOPIC: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        got: list[Any] = []
        for _ in range(10):
            got += consumer.receive(2, 30)
            if len(got) >= 2:
                break
        first, second = got[:2]
        consumer.ack(first)
        with pytest.raises(BadRequestException, match="not in flight") as stale:
            consumer.ack(first)  # acked already
        assert stale.value.code == Code.INVALID_RECEIPT_HANDLE
        old = replace_handle(second, second.receipt_handle)
        consumer.change_invisible_duration(second, 30)  # issues a new handle
        with pytest.raises(BadRequestException) as superseded:
            consumer.ack(old)
        assert superseded.value.code == Code.INVALID_RECEIPT_HANDLE
        consumer.ack(second)
    finally:
        consumer.shutdown()


def replace_handle(message: Any, handle: str) -> Any:
    """A shallow copy of an official client message that keeps ``handle``."""
    kept = copy.copy(message)
    kept.receipt_handle = handle
    return kept


# ---- our client ---------------------------------------------------------------------------


def test_our_client_raises_the_specific_errors(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint, max_attempts=1) as client:
        with pytest.raises(MessageTooLargeError, match=str(MAX_BODY_BYTES)):
            client.send(TOPIC, bytes(MAX_BODY_BYTES + 1))
        with pytest.raises(InvalidTopicError, match="bad topic"):
            client.send("bad topic", b"x")
        with pytest.raises(TopicNotFoundError, match="no-such-topic"):
            client.send("no-such-topic", b"x")
        with pytest.raises(TopicNotFoundError, match="no-such-topic"):
            client.pull(GROUP, "no-such-topic", 0, 0, 1)
        with pytest.raises(GroupNotFoundError, match=UNKNOWN_GROUP):
            client.get_offset(UNKNOWN_GROUP, TOPIC, 0)
        assert client.topic_status(TOPIC)  # and the broker is fine


# ---- forged receipt handles ---------------------------------------------------------------


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def real_handle(stub: Any) -> ReceiptHandle:
    request = service_pb2.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        batch_size=1,
        auto_renew=False,
    )
    request.invisible_duration.FromMilliseconds(120_000)
    request.long_polling_timeout.FromMilliseconds(0)
    for r in stub.ReceiveMessage(request, timeout=10, metadata=[("x-mq-client-id", CLIENT_ID)]):
        if r.WhichOneof("content") == "message":
            return decode_handle(r.message.system_properties.receipt_handle)
    raise AssertionError("nothing to receive")


FORGERIES = st.fixed_dictionaries(
    {},
    optional={
        "topic": st.sampled_from([TOPIC, "other-topic", "%RETRY%" + GROUP, "é" * 60]),
        "queue_id": st.sampled_from([-1, 0, 1, 7, 2**31 - 1, -(2**31)]),
        "queue_offset": st.sampled_from([-1, 0, 1, 3, 2**62, -(2**63)]),
        "checkpoint_offset": st.sampled_from([-1, 0, 1, 2**40, 2**63 - 1]),
        "pop_time_ms": st.sampled_from([-1, 0, 2**62, 2**63 - 1]),
        "invisible_ms": st.sampled_from([-1, 0, 1, 2**62, 2**63 - 1]),
        "broker_name": st.sampled_from(["broker-b", "x" * 255]),
    },
)


@pytest.mark.parametrize("budget", budgets(60, 2_000))
def test_forged_receipt_handles_are_refused(
    broker: BrokerProcess, stub: Any, budget: settings
) -> None:
    genuine = real_handle(stub)
    group, topic = pb.Resource(name=GROUP), pb.Resource(name=TOPIC)
    ok_seen = 0

    @budget
    @given(FORGERIES.filter(bool), st.sampled_from(["ack", "change", "dlq"]))
    def check(changes: dict[str, Any], rpc: str) -> None:
        nonlocal ok_seen
        handle = replace(genuine, **changes).encode()
        if rpc == "ack":
            reply = stub.AckMessage(
                service_pb2.AckMessageRequest(
                    group=group,
                    topic=topic,
                    entries=[
                        service_pb2.AckMessageEntry(message_id="forged", receipt_handle=handle)
                    ],
                ),
                timeout=10,
            )
        elif rpc == "change":
            request = service_pb2.ChangeInvisibleDurationRequest(
                group=group, topic=topic, receipt_handle=handle, message_id="forged"
            )
            request.invisible_duration.FromMilliseconds(60_000)
            reply = stub.ChangeInvisibleDuration(request, timeout=10)
        else:
            reply = stub.ForwardMessageToDeadLetterQueue(
                service_pb2.ForwardMessageToDeadLetterQueueRequest(
                    group=group,
                    topic=topic,
                    receipt_handle=handle,
                    message_id="forged",
                    delivery_attempt=1,
                    max_delivery_attempts=3,
                ),
                timeout=10,
            )
        code = reply.status.code
        ok_seen += code == Code.OK
        assert code in (Code.INVALID_RECEIPT_HANDLE, Code.OK), (changes, rpc, reply.status)
        assert reply.status.message

    check()
    # Only a forgery that names the delivery exactly (changing nothing that matters, like
    # the invisible time) may act on it, and then only once.
    assert ok_seen <= 1
    errors = [line for line in broker.output if " ERROR broker_core" in line]
    assert not errors, errors


# ---- Spark options, without Spark ---------------------------------------------------------

DIGITS_INT_REFUSES = "".join(
    c for c in map(chr, range(0x2FFFF)) if c.isdigit() and not c.isdecimal()
)  # '²', '①', … pass str.isdigit, not int()
HOSTILE = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "0",
            "-1",
            "1",
            "99999999999999999999",
            "1.5",
            "1e3",
            "true",
            "TRUE",
            "yes",
            "latest",
            "earliest",
            "{}",
            "[]",
            "null",
            '{"t": {"b:0": 1}}',
            '{"t": {"b:0": -2}}',
            '{"t": {"b:x": 1}}',
            '{"t": 5}',
            '{"t": {"b:0": 1.5}}',
            '{"t": {"b:0": 1e400}}',
            '{"t": {"b:0": true}}',
            '{"t": {"": 1}}',
            "{" * 50,
            '{"a":' * 40 + "1" + "}" * 40,
            "h:1",
            "h:0",
            "h:65536",
            "h:1,h:2",
            "h:1,,h:2",
            "[::1]:9",
            "\x00",
            "a" * 300,
            "A || B",
            "A |",
            "a = 1",
            "a =",
            "15m",
            "30s",
            "5x",
            "64m",
            "0m",
            "-5m",
            "t.*",
            "(",
            "١٢",
            "𝟏",
            "٣m",
        ]
    ),
    st.text(
        st.characters(blacklist_characters=DIGITS_INT_REFUSES, blacklist_categories=["Cs"]),
        max_size=12,
    ),
)
READ_BASE = {"endpoints": "127.0.0.1:1", "topic": "orders"}


def assert_config_error_names(exc: ConfigError, options: dict[str, str]) -> None:
    message = str(exc)
    named = [name for name in options if f"'{name}'" in message or f"'{name.lower()}'" in message]
    assert named or "'topic' / 'topics' / 'topicPattern'" in message, message


@pytest.mark.parametrize("budget", budgets(300, 20_000))
@pytest.mark.parametrize("streaming", [False, True])
def test_read_options_are_parsed_or_refused_naming_the_option(
    budget: settings, streaming: bool
) -> None:
    @budget
    @given(
        st.dictionaries(
            st.sampled_from(sorted(KNOWN_OPTIONS.values())), HOSTILE, min_size=1, max_size=3
        )
    )
    def check(changes: dict[str, str]) -> None:
        options = {**READ_BASE, **changes}
        if {"topics", "topicPattern"} & set(changes) and "topic" not in changes:
            del options["topic"]
        try:
            parse_read_options(options, streaming=streaming)
        except ConfigError as exc:
            assert_config_error_names(exc, options)

    check()


@pytest.mark.parametrize("budget", budgets(200, 10_000))
def test_sink_options_are_parsed_or_refused_naming_the_option(budget: settings) -> None:
    @budget
    @given(st.dictionaries(st.sampled_from(sorted(SINK_OPTIONS)), HOSTILE, min_size=1, max_size=3))
    def check(changes: dict[str, str]) -> None:
        options = {"endpoints": "127.0.0.1:1", "topic": "orders", **changes}
        try:
            parse_sink_options(options)
        except ConfigError as exc:
            assert_config_error_names(exc, options)

    check()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("maxMessagesPerTrigger", "²"),
        ("startingTimestamp", "²"),
        ("startingOffsets", '{"orders": {"broker-a:²": 1}}'),
        ("endpoints", "h:²"),
    ],
)
def test_superscript_digits_are_config_errors(option: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"'{option}'"):
        parse_read_options({**READ_BASE, option: value}, streaming=True)


def test_deeply_nested_offsets_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'startingOffsets'"):
        parse_read_options(
            {**READ_BASE, "startingOffsets": '{"t":' + "[" * 100_000}, streaming=False
        )
