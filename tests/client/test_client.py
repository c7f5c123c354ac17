"""``RocketMQClient``: batch send, exact-range pull, offsets and routes over real gRPC.

The first part needs no network (endpoint parsing, message conversion, the code →
exception table, the retry policy, pickling); the rest runs against a broker process.
"""

from __future__ import annotations

import gzip
import multiprocessing
import pickle
import socket
import threading
import time

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import errors
from broker_core.client import (
    BrokerUnavailableError,
    OutgoingMessage,
    RocketMQClient,
    parse_endpoint,
)
from broker_core.client.convert import crc32_hex, from_protobuf
from broker_core.client.errors import error_for
from tests.client.pb_reference import to_protobuf

Code = pb.Code

# ---- no network -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:8081", "127.0.0.1:8081"),
        ("localhost:9876;other:1", "localhost:9876"),
        ("http://10.0.0.1:80", "10.0.0.1:80"),
    ],
)
def test_parse_endpoint(given, expected) -> None:
    assert parse_endpoint(given) == expected


@pytest.mark.parametrize("bad", ["", "host", "host:", ":80", "host:http", "host:70000"])
def test_parse_endpoint_refuses_garbage(bad) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="HOST:PORT"):
        parse_endpoint(bad)


def test_outgoing_message_accepts_tuples_and_bare_bodies() -> None:
    assert OutgoingMessage.of(b"x") == OutgoingMessage(b"x")
    assert OutgoingMessage.of("text") == OutgoingMessage(b"text")
    assert OutgoingMessage.of((b"x", "TagA", ["k"])) == OutgoingMessage(b"x", "TagA", ["k"])
    full = (b"x", "T", ("k1", "k2"), {"a": "b"}, "g", None)
    assert OutgoingMessage.of(full) == OutgoingMessage(*full)


def test_to_protobuf_sets_id_type_digest_and_born_fields() -> None:
    msg = to_protobuf("orders", OutgoingMessage(b"hello", "TagA", ["k1", "k2"], {"p": "v"}))
    props = msg.system_properties
    assert len(props.message_id) == 34 and props.message_type == pb.MessageType.NORMAL
    assert props.body_digest.type == pb.DigestType.CRC32
    assert props.body_digest.checksum == "3610A686"  # zlib.crc32(b"hello"), 8 upper hex
    assert (props.tag, list(props.keys), dict(msg.user_properties)) == (
        "TagA",
        ["k1", "k2"],
        {"p": "v"},
    )
    assert abs(props.born_timestamp.ToMilliseconds() - time.time() * 1000) < 60_000
    fifo = to_protobuf("orders", OutgoingMessage(b"x", message_group="g1"))
    assert fifo.system_properties.message_type == pb.MessageType.FIFO
    timed = to_protobuf("orders", OutgoingMessage(b"x", delivery_timestamp_ms=1_700_000_000_123))
    assert timed.system_properties.message_type == pb.MessageType.DELAY
    assert timed.system_properties.delivery_timestamp.ToMilliseconds() == 1_700_000_000_123


@pytest.mark.parametrize(
    ("topic", "message", "error"),
    [
        ("orders", OutgoingMessage(b""), errors.InvalidArgumentError),
        ("bad topic", OutgoingMessage(b"x"), errors.InvalidTopicError),
        (
            "orders",
            OutgoingMessage(b"x", message_group="g", delivery_timestamp_ms=1),
            errors.InvalidArgumentError,
        ),
    ],
)
def test_to_protobuf_refuses_bad_messages(topic, message, error) -> None:
    with pytest.raises(error):
        to_protobuf(topic, message)


def test_from_protobuf_verifies_the_digest_and_inflates_gzip() -> None:
    msg = to_protobuf("orders", OutgoingMessage(b"payload"))
    msg.system_properties.queue_id, msg.system_properties.queue_offset = 2, 40
    got = from_protobuf(msg)
    assert (got.body, got.queue_id, got.queue_offset, got.message_type) == (
        b"payload",
        2,
        40,
        "NORMAL",
    )
    msg.system_properties.body_encoding = pb.Encoding.GZIP
    msg.body = gzip.compress(b"payload")
    msg.system_properties.body_digest.checksum = crc32_hex(msg.body)
    assert from_protobuf(msg).body == b"payload"
    msg.system_properties.body_digest.checksum = "00000000"
    with pytest.raises(errors.CorruptionError, match="digest"):
        from_protobuf(msg)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (Code.TOPIC_NOT_FOUND, errors.TopicNotFoundError),
        (Code.CONSUMER_GROUP_NOT_FOUND, errors.GroupNotFoundError),
        (Code.MESSAGE_NOT_FOUND, errors.MessageNotFoundError),
        (Code.ILLEGAL_OFFSET, errors.InvalidOffsetError),
        (Code.ILLEGAL_TOPIC, errors.InvalidTopicError),
        (Code.BAD_REQUEST, errors.InvalidArgumentError),
        (Code.MESSAGE_BODY_TOO_LARGE, errors.MessageTooLargeError),
        (Code.INVALID_RECEIPT_HANDLE, errors.InvalidReceiptHandleError),
        (Code.FORBIDDEN, errors.PermissionDeniedError),
        (Code.TOO_MANY_REQUESTS, errors.BusyError),
        (Code.MASTER_PERSISTENCE_TIMEOUT, errors.FlushTimeoutError),
        (Code.MESSAGE_CORRUPTED, errors.MessageCorruptedError),
        (Code.UNSUPPORTED, errors.UnsupportedError),
        (Code.INTERNAL_ERROR, errors.RocketMQError),
    ],
)
def test_status_codes_become_our_exceptions(code, cls) -> None:
    error = error_for(code, "because")
    assert type(error) is cls
    assert "because" in str(error) and Code.Name(code) in str(error)


def test_busy_is_retried_with_bounded_attempts() -> None:
    client = RocketMQClient("127.0.0.1:1", max_attempts=3, retry_backoff_s=0)
    calls: list[int] = []

    def busy_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise error_for(Code.TOO_MANY_REQUESTS, "busy")
        return "done"

    assert client.broker.transport.retrying("Test", busy_twice) == "done" and len(calls) == 3

    def always(code: int) -> str:
        calls.append(1)
        raise error_for(code, "no")

    calls.clear()
    with pytest.raises(errors.BusyError):
        client.broker.transport.retrying("Test", lambda: always(Code.TOO_MANY_REQUESTS))
    assert len(calls) == 3  # max_attempts, then the error
    calls.clear()
    with pytest.raises(errors.TopicNotFoundError):
        client.broker.transport.retrying("Test", lambda: always(Code.TOPIC_NOT_FOUND))
    assert len(calls) == 1  # not retriable: no second attempt


def test_unreachable_broker_raises_broker_unavailable_quickly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    client = RocketMQClient(f"127.0.0.1:{port}", timeout_s=2, max_attempts=2, retry_backoff_s=0.01)
    with client, pytest.raises(BrokerUnavailableError, match="unreachable") as info:
        client.health()
    assert info.value.retriable
    assert time.monotonic() - started < 10


# ---- against a broker -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_queue(client: RocketMQClient) -> list[str]:
    """Topic ``ranged`` with one queue holding messages 0..9 (ids returned in order)."""
    client.create_topic("ranged", queues=1)
    receipts = client.send_batch(
        "ranged",
        [
            OutgoingMessage(
                f"m{i}".encode(), "even" if i % 2 == 0 else "odd", [f"key-{i}"], {"n": str(i)}
            )
            for i in range(10)
        ],
    )
    assert [r.offset for r in receipts] == list(range(10))
    return [r.message_id for r in receipts]


def test_send_batch_sends_many_messages_in_one_request(client) -> None:
    client.create_topic("batched", queues=3)
    items = [(f"body {i}".encode(), "TagA", (f"k{i}",), {"i": str(i)}) for i in range(50)]
    receipts = client.send_batch("batched", items)
    assert len({r.message_id for r in receipts}) == 50
    pulled = {}
    for q in range(3):
        batch = client.pull("GID_batch", "batched", q, 0, 64)
        assert (batch.min_offset, batch.max_offset, batch.next_offset) == (
            0,
            len(batch.messages),
            len(batch.messages),
        )
        pulled.update({m.message_id: m for m in batch.messages})
    assert sorted(pulled) == sorted(r.message_id for r in receipts)
    for receipt, (body, tag, keys, props) in zip(receipts, items, strict=True):
        got = pulled[receipt.message_id]
        assert (got.body, got.tag, got.keys, got.topic) == (body, tag, keys, "batched")
        assert got.properties["i"] == props["i"] and got.queue_offset == receipt.offset


def test_pull_an_exact_range(client, one_queue) -> None:
    batch = client.pull("GID_range", "ranged", 0, 3, 4)
    assert [m.queue_offset for m in batch.messages] == [3, 4, 5, 6]
    assert [m.body for m in batch.messages] == [b"m3", b"m4", b"m5", b"m6"]
    assert [m.message_id for m in batch.messages] == one_queue[3:7]
    assert (batch.next_offset, batch.min_offset, batch.max_offset) == (7, 0, 10)
    assert batch.messages[0].born_timestamp_ms > 0 and batch.messages[0].store_timestamp_ms > 0


def test_pull_at_the_end_is_empty_and_beyond_is_an_illegal_offset(client, one_queue) -> None:
    end = client.pull("GID_range", "ranged", 0, 10, 5)
    assert (end.messages, end.next_offset) == ([], 10)
    with pytest.raises(errors.InvalidOffsetError) as info:
        client.pull("GID_range", "ranged", 0, 25, 5)
    assert info.value.next_offset == 10


def test_pull_with_tag_and_sql_filters(client, one_queue) -> None:
    odd = client.pull("GID_filter", "ranged", 0, 0, 10, filter_expression="odd")
    assert [m.queue_offset for m in odd.messages] == [1, 3, 5, 7, 9]
    sql = client.pull(
        "GID_filter", "ranged", 0, 0, 10, filter_expression="n > 6", filter_type="SQL"
    )
    assert [m.body for m in sql.messages] == [b"m7", b"m8", b"m9"]
    with pytest.raises(errors.FilterSyntaxError):
        client.pull("GID_filter", "ranged", 0, 0, 10, filter_expression="n >", filter_type="SQL")


def test_long_polling_pull_returns_when_a_message_arrives(client) -> None:
    client.create_topic("polled", queues=1)
    result: list[object] = []
    puller = threading.Thread(
        target=lambda: result.append(
            client.pull("GID_poll", "polled", 0, 0, 1, long_polling_timeout_ms=20_000)
        )
    )
    started = time.monotonic()
    puller.start()
    client.send_batch("polled", [b"wake up"])
    puller.join(30)
    assert [m.body for m in result[0].messages] == [b"wake up"]  # type: ignore[attr-defined]
    assert time.monotonic() - started < 15


def test_offsets_round_trip(client, one_queue) -> None:
    # consume from last offset: 0 while the queue's first message is in memory (RocketMQ)
    assert client.get_offset("GID_fresh", "ranged", 0) == 0
    client.update_offset("GID_offsets", "ranged", 0, 4)
    assert client.get_offset("GID_offsets", "ranged", 0) == 4
    assert client.group_progress("GID_offsets", "ranged")["total_lag"] == 6
    assert client.query_offset("ranged", 0, "BEGINNING") == 0
    assert client.query_offset("ranged", 0, "END") == 10
    assert client.query_offset("ranged", 0, "TIMESTAMP", timestamp_ms=0) == 0
    assert (
        client.query_offset(
            "ranged", 0, "TIMESTAMP", timestamp_ms=int(time.time() * 1000) + 3_600_000
        )
        == 10
    )


def test_query_route_lists_the_queues_on_this_broker(client, broker) -> None:
    client.create_topic("routed", queues=3)
    route = client.query_route("routed")
    assert [q.queue_id for q in route] == [0, 1, 2]
    assert {(q.endpoint, q.permission, q.broker_name) for q in route} == {
        (broker.endpoint, "READ_WRITE", "broker-a")
    }


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.pull("GID_x", "no_such_topic", 0, 0, 1), errors.TopicNotFoundError),
        (lambda c: c.pull("GID x", "ranged", 0, 0, 1), errors.InvalidGroupError),
        (lambda c: c.pull("GID_x", "ranged", 7, 0, 1), errors.InvalidArgumentError),
        (lambda c: c.update_offset("GID_x", "ranged", 0, -1), errors.InvalidOffsetError),
        (lambda c: c.get_offset("GID_x", "no_such_topic", 0), errors.TopicNotFoundError),
        (lambda c: c.query_offset("ranged", 9, "END"), errors.InvalidArgumentError),
        (lambda c: c.send_batch("ranged", [b"x" * (5 << 20)]), errors.MessageTooLargeError),
        (lambda c: c.send_batch("ranged", []), errors.InvalidArgumentError),
        (lambda c: c.send_batch("bad topic", [b"x"]), errors.InvalidTopicError),
    ],
)
def test_bad_requests_raise_our_errors(client, one_queue, call, error) -> None:
    with pytest.raises(error):
        call(client)


def _pull_in_child(blob: bytes, out: multiprocessing.Queue) -> None:  # runs in a new process
    client = pickle.loads(blob)
    with client:
        out.put([m.body for m in client.pull("GID_child", "ranged", 0, 8, 2).messages])


def test_a_pickled_client_works_in_another_process(client, one_queue) -> None:
    client.health()  # the parent's channel is open
    blob = pickle.dumps(client)
    assert pickle.loads(blob).broker.transport._channel is None
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_pull_in_child, args=(blob, out))
    child.start()
    try:
        assert out.get(timeout=60) == [b"m8", b"m9"]
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert client.pull("GID_child", "ranged", 0, 9, 1).messages[0].body == b"m9"  # still fine


def test_close_is_idempotent_and_the_client_reopens(broker) -> None:
    client = RocketMQClient(broker.endpoint)
    client.close()
    assert client.health()["broker_name"] == "broker-a"
    client.close()
    client.close()
    assert client.health()["endpoint"] == broker.endpoint
    client.close()
