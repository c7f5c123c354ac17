"""PullMessage and the offset RPCs against a real broker process, over raw gRPC stubs.

The store is filled before the broker process starts (``prefill``), so these tests need
no producer RPC. ``prefill`` and the stub helpers are shared by the consumer tests.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc
from rocketmq.v5.model import Message as ClientMessage

from broker_core.broker.broker import Broker
from broker_core.broker.groups import GroupConfig
from broker_core.broker.sending import SendResult
from broker_core.broker.topics import TopicConfig
from broker_core.client.raw import RAW_PULL_METHOD
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.message import Message
from tests.server.conftest import DEFAULT_CONFIG, BrokerProcess, start_broker

Code = pb.Code
TOPIC = "pull-orders"


# ---- shared helpers -----------------------------------------------------------------------


def prefill(
    workdir: Path,
    messages: Sequence[Message],
    *,
    topics: Sequence[TopicConfig] = (),
    groups: Sequence[GroupConfig] = (),
) -> list[SendResult]:
    """Create topics and groups and store messages in ``workdir/store`` (no process)."""
    broker = Broker(
        BrokerConfig(**DEFAULT_CONFIG["broker"]),
        StoreConfig(store_dir=str(workdir / "store"), **DEFAULT_CONFIG["store"]),
    )
    broker.start()
    try:
        for topic in topics:
            broker.update_topic(topic)
        for group in groups:
            broker.groups.create_or_update(group)
        results = broker.sending.send(list(messages)) if messages else []
        assert broker.store.wait_dispatched()
    finally:
        broker.stop()
    return results


def msg(
    topic: str,
    body: bytes,
    *,
    queue_id: int = -1,
    tag: str | None = None,
    keys: Sequence[str] = (),
    **user: str,
) -> Message:
    props = dict(user)
    if tag:
        props["TAGS"] = tag
    if keys:
        props["KEYS"] = " ".join(keys)
    return Message(topic, body, queue_id=queue_id, properties=props)


def mq(topic: str, queue_id: int = 0) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


def tag_filter(expression: str) -> pb.FilterExpression:
    return pb.FilterExpression(type=pb.FilterType.TAG, expression=expression)


def sql_filter(expression: str) -> pb.FilterExpression:
    return pb.FilterExpression(type=pb.FilterType.SQL, expression=expression)


def split_stream(responses: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """(statuses, messages, the third kind: delivery timestamps or next offsets)."""
    statuses = [r.status for r in responses if r.WhichOneof("content") == "status"]
    messages = [r.message for r in responses if r.WhichOneof("content") == "message"]
    rest = [
        getattr(r, r.WhichOneof("content"))
        for r in responses
        if r.WhichOneof("content") not in ("status", "message")
    ]
    return statuses, messages, rest


@pytest.fixture(scope="module")
def stub(broker: BrokerProcess) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


# ---- this module's broker -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SendResult], int]:
    workdir = tmp_path_factory.mktemp("pull")
    before_ms = int(time.time() * 1000)
    batch = [
        msg(
            TOPIC,
            f"order-{i}".encode(),
            queue_id=0,
            tag="A" if i % 2 == 0 else "B",
            keys=[f"k{i}"],
            region="eu" if i < 5 else "us",
            seq=str(i),
        )
        for i in range(10)
    ]
    batch += [msg(TOPIC, f"other-{i}".encode(), queue_id=1) for i in range(3)]
    results = prefill(workdir, batch, topics=[TopicConfig(TOPIC, 2, 2)])
    return workdir, results, before_ms


@pytest.fixture(scope="module")
def broker(sent: tuple[Path, list[SendResult], int]) -> Iterator[BrokerProcess]:
    proc = start_broker(sent[0])
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def pull(
    stub: Any,
    offset: int,
    batch: int = 32,
    *,
    topic: str = TOPIC,
    queue_id: int = 0,
    group: str = "pull-group",
    flt: pb.FilterExpression | None = None,
    poll_ms: int | None = None,
    timeout_s: float = 10,
) -> list[Any]:
    request = service_pb2.PullMessageRequest(
        group=pb.Resource(name=group),
        message_queue=mq(topic, queue_id),
        offset=offset,
        batch_size=batch,
        filter_expression=flt,
    )
    if poll_ms is not None:
        request.long_polling_timeout.CopyFrom(
            Duration(seconds=poll_ms // 1000, nanos=poll_ms % 1000 * 1_000_000)
        )
    return list(stub.PullMessage(request, timeout=timeout_s))


# ---- PullMessage --------------------------------------------------------------------------


def test_pull_returns_an_exact_range_then_the_next_offset(stub, sent) -> None:
    responses = pull(stub, offset=2, batch=3)
    kinds = [r.WhichOneof("content") for r in responses]
    assert kinds == ["status", "message", "message", "message", "next_offset"]
    statuses, messages, rest = split_stream(responses)
    assert statuses[0].code == Code.OK
    assert [m.body for m in messages] == [b"order-2", b"order-3", b"order-4"]
    assert [m.system_properties.queue_offset for m in messages] == [2, 3, 4]
    assert rest == [5]
    results = sent[1]
    assert [m.system_properties.message_id for m in messages] == [
        r.message_id for r in results[2:5]
    ]


def test_pulled_message_carries_system_and_user_properties(stub, sent) -> None:
    [m] = split_stream(pull(stub, offset=3, batch=1))[1]
    sp = m.system_properties
    assert m.topic.name == TOPIC
    assert (sp.tag, list(sp.keys), sp.queue_id, sp.queue_offset) == ("B", ["k3"], 0, 3)
    assert dict(m.user_properties) == {"region": "eu", "seq": "3"}
    assert sp.body_digest.type == pb.DigestType.MD5  # as RocketMQ's proxy sends it
    assert sp.body_digest.checksum == hashlib.md5(b"order-3").hexdigest().upper()
    assert sp.body_encoding == pb.Encoding.IDENTITY
    assert sp.message_type == pb.MessageType.NORMAL
    assert sp.delivery_attempt == 1
    assert sp.born_timestamp.seconds >= sent[2] // 1000
    assert sp.store_timestamp.seconds >= sp.born_timestamp.seconds
    assert sp.store_host and sp.born_host
    assert not sp.HasField("receipt_handle")
    decoded = ClientMessage().fromProtobuf(m)  # the official client's own decoding
    assert (decoded.body, decoded.corrupted, decoded.tag) == (b"order-3", False, "B")


def test_pull_at_the_end_is_message_not_found_with_the_same_offset(stub) -> None:
    statuses, messages, rest = split_stream(pull(stub, offset=10))
    assert [s.code for s in statuses] == [Code.MESSAGE_NOT_FOUND]
    assert messages == [] and rest == [10]


def test_long_poll_answers_before_the_grpc_deadline(stub) -> None:
    started = time.monotonic()
    statuses, _, rest = split_stream(pull(stub, offset=10, poll_ms=20_000, timeout_s=2.5))
    elapsed_s = time.monotonic() - started
    assert [s.code for s in statuses] == [Code.MESSAGE_NOT_FOUND] and rest == [10]
    assert 0.5 < elapsed_s < 2.5


def test_pull_past_the_end_is_illegal_offset_and_points_back(stub) -> None:
    statuses, messages, rest = split_stream(pull(stub, offset=100))
    assert [s.code for s in statuses] == [Code.ILLEGAL_OFFSET]
    assert "100" in statuses[0].message
    assert messages == [] and rest == [10]


def test_negative_offset_is_illegal_offset(stub) -> None:
    [response] = pull(stub, offset=-1)
    assert response.status.code == Code.ILLEGAL_OFFSET


def test_pull_with_tag_filter(stub) -> None:
    _, messages, rest = split_stream(pull(stub, offset=0, flt=tag_filter("A")))
    assert [m.body for m in messages] == [f"order-{i}".encode() for i in (0, 2, 4, 6, 8)]
    assert rest == [10]


def test_pull_with_sql_filter(stub) -> None:
    flt = sql_filter("region = 'us' AND TAGS = 'B'")
    _, messages, _ = split_stream(pull(stub, offset=0, flt=flt))
    assert [m.body for m in messages] == [b"order-5", b"order-7", b"order-9"]


@pytest.mark.parametrize(
    ("flt", "code"),
    [
        (tag_filter("A ||"), Code.ILLEGAL_FILTER_EXPRESSION),
        (sql_filter("region = = 'x'"), Code.ILLEGAL_FILTER_EXPRESSION),
        (sql_filter(""), Code.ILLEGAL_FILTER_EXPRESSION),
        (pb.FilterExpression(type=7, expression="x"), Code.ILLEGAL_FILTER_EXPRESSION),
    ],
)
def test_bad_filter_is_refused(stub, flt, code) -> None:
    [response] = pull(stub, offset=0, flt=flt)
    assert response.status.code == code, response.status.message


def pull_raw_header(broker: BrokerProcess, fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON header of one ``rmq.bulk.v1.Bulk/PullRaw`` answer (pull-group, queue 0)."""
    request = {"group": "pull-group", "topic": TOPIC, "queue_id": 0, "offset": 0, "max_count": 8}
    with grpc.insecure_channel(broker.endpoint) as channel:
        call = channel.unary_unary(RAW_PULL_METHOD)
        response = call(json.dumps({**request, **fields}).encode(), timeout=10)
    (length,) = struct.unpack_from(">I", response, 0)
    header: dict[str, Any] = json.loads(response[4 : 4 + length])
    return header


@pytest.mark.parametrize(
    ("pull_message_filter", "pull_raw_fields"),
    [
        (pb.FilterExpression(type=7, expression="x"), {"filter_type": "XML"}),
        (sql_filter(""), {"filter_type": "SQL", "filter_expression": " "}),
        (tag_filter("A ||"), {"filter_type": "TAG", "filter_expression": "A ||"}),
    ],
)
def test_both_pull_paths_refuse_a_bad_filter_with_the_same_code(
    stub, broker, pull_message_filter, pull_raw_fields
) -> None:
    [response] = pull(stub, offset=0, flt=pull_message_filter)
    raw_status = pull_raw_header(broker, pull_raw_fields)["status"]
    assert response.status.code == Code.ILLEGAL_FILTER_EXPRESSION, response.status.message
    assert raw_status["code"] == Code.ILLEGAL_FILTER_EXPRESSION, raw_status["message"]


def test_pull_raw_with_a_good_filter_finds_what_pull_message_finds(stub, broker) -> None:
    _, messages, rest = split_stream(pull(stub, offset=0, flt=tag_filter("B")))
    header = pull_raw_header(broker, {"filter_type": "tag", "filter_expression": "B"})
    assert header["status"]["code"] == Code.OK, header["status"]["message"]
    assert [m.body for m in messages] == [f"order-{i}".encode() for i in (1, 3, 5, 7, 9)]
    assert (header["count"], header["next_offset"]) == (len(messages), rest[0])


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"topic": "no-such-topic"}, Code.TOPIC_NOT_FOUND),
        ({"topic": ""}, Code.ILLEGAL_TOPIC),
        ({"queue_id": 7}, Code.BAD_REQUEST),
        ({"group": "bad group!"}, Code.ILLEGAL_CONSUMER_GROUP),
        ({"batch": 0}, Code.BAD_REQUEST),
    ],
)
def test_bad_pull_requests_get_their_code(stub, kwargs, code) -> None:
    [response] = pull(stub, offset=0, **kwargs)
    assert response.status.code == code, response.status.message


@pytest.mark.parametrize(
    ("pull_message_args", "pull_raw_fields", "code"),
    [
        ({"offset": -1}, {"offset": -1}, Code.ILLEGAL_OFFSET),
        ({"offset": 0, "queue_id": -1}, {"queue_id": -1}, Code.BAD_REQUEST),
        ({"offset": 0, "batch": 0}, {"max_count": 0}, Code.BAD_REQUEST),
        ({"offset": 0, "batch": -3}, {"max_bytes": 0}, Code.BAD_REQUEST),
    ],
)
def test_both_pull_paths_refuse_bad_arguments_with_the_same_code(
    stub, broker, pull_message_args, pull_raw_fields, code
) -> None:
    """The argument rules live in one place (``protocol.pull_args``), so both answer alike."""
    [response] = pull(stub, **pull_message_args)
    raw_status = pull_raw_header(broker, pull_raw_fields)["status"]
    assert response.status.code == code, response.status.message
    assert raw_status["code"] == code, raw_status["message"]


# ---- offsets ------------------------------------------------------------------------------


def test_update_then_get_offset_round_trips(stub) -> None:
    group = pb.Resource(name="offset-group")
    update = service_pb2.UpdateOffsetRequest(group=group, message_queue=mq(TOPIC, 1), offset=2)
    assert stub.UpdateOffset(update, timeout=5).status.code == Code.OK
    got = stub.GetOffset(
        service_pb2.GetOffsetRequest(group=group, message_queue=mq(TOPIC, 1)), timeout=5
    )
    assert (got.status.code, got.offset) == (Code.OK, 2)
    _, messages, _ = split_stream(pull(stub, offset=got.offset, queue_id=1))
    assert [m.body for m in messages] == [b"other-2"]


def test_get_offset_of_a_new_group_is_where_it_starts(stub) -> None:
    request = service_pb2.GetOffsetRequest(
        group=pb.Resource(name="fresh-group"), message_queue=mq(TOPIC, 0)
    )
    got = stub.GetOffset(request, timeout=5)
    # consume from the last offset, which RocketMQ reads from 0 while the queue's first
    # message is in memory (tests/broker/test_group_start.py has the end past that window)
    assert (got.status.code, got.offset) == (Code.OK, 0)


def query_offset(stub: Any, policy: int, timestamp_ms: int | None = None, **kw: Any) -> Any:
    request = service_pb2.QueryOffsetRequest(
        message_queue=mq(TOPIC, kw.get("queue_id", 0)), query_offset_policy=policy
    )
    if timestamp_ms is not None:
        request.timestamp.CopyFrom(
            Timestamp(seconds=timestamp_ms // 1000, nanos=timestamp_ms % 1000 * 1_000_000)
        )
    return stub.QueryOffset(request, timeout=5)


def test_query_offset_by_policy(stub, sent) -> None:
    policy = pb.QueryOffsetPolicy
    assert query_offset(stub, policy.BEGINNING).offset == 0
    assert query_offset(stub, policy.END).offset == 10
    assert query_offset(stub, policy.END, queue_id=1).offset == 3
    assert query_offset(stub, policy.TIMESTAMP, sent[2] - 60_000).offset == 0
    future = query_offset(stub, policy.TIMESTAMP, int(time.time() * 1000) + 3_600_000)
    assert (future.status.code, future.offset) == (Code.OK, 10)


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda s: query_offset(s, pb.QueryOffsetPolicy.TIMESTAMP), Code.BAD_REQUEST),
        (lambda s: query_offset(s, 9), Code.BAD_REQUEST),
        (lambda s: query_offset(s, pb.QueryOffsetPolicy.END, queue_id=5), Code.BAD_REQUEST),
        (
            lambda s: s.QueryOffset(
                service_pb2.QueryOffsetRequest(message_queue=mq("nope")), timeout=5
            ),
            Code.TOPIC_NOT_FOUND,
        ),
        (
            lambda s: s.UpdateOffset(
                service_pb2.UpdateOffsetRequest(
                    group=pb.Resource(name="g"), message_queue=mq(TOPIC), offset=-5
                ),
                timeout=5,
            ),
            Code.ILLEGAL_OFFSET,
        ),
        (
            lambda s: s.UpdateOffset(
                service_pb2.UpdateOffsetRequest(
                    group=pb.Resource(name=""), message_queue=mq(TOPIC), offset=1
                ),
                timeout=5,
            ),
            Code.ILLEGAL_CONSUMER_GROUP,
        ),
        (
            lambda s: s.GetOffset(
                service_pb2.GetOffsetRequest(group=pb.Resource(name="g"), message_queue=mq("nope")),
                timeout=5,
            ),
            Code.TOPIC_NOT_FOUND,
        ),
    ],
)
def test_bad_offset_requests_get_their_code(stub, call, code) -> None:
    response = call(stub)
    assert response.status.code == code, response.status.message


# ---- official-client helpers (shared with the consumer tests) -----------------------------


def wait_for(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.05) -> None:
    """Poll ``predicate`` until true; for outcomes only a client callback reports."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def client_message(
    topic: str, body: bytes, *, tag: str | None = None, keys: Sequence[str] = (), **user: str
) -> ClientMessage:
    """An official-client message to send."""
    m = ClientMessage()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys[0]  # the client's setter takes one key per call
        for key in keys[1:]:
            m.keys = key
    for name, value in user.items():
        m.add_property(name, value)
    return m
