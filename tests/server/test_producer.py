"""Producer RPCs against a real broker process: SendMessage, EndTransaction, RecallMessage
and the transaction check-back over Telemetry, with the official client and raw stubs.

What was stored is read back through the broker's admin service while it runs (QueryMessage
by id within the real topic, TopicStatus), and, for the full field round trip, from the
store directory itself after the broker process stopped cleanly.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc
from rocketmq.v5.exception import ClientException

from broker_core.config import StoreConfig
from broker_core.message import StoredMessage
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.server.conftest import DEFAULT_CONFIG, BrokerProcess, start_broker

Code = pb.Code
TIMEOUT_S = 10
MIB = 1024 * 1024


def admin_call(endpoint: str, method: str, **fields: Any) -> dict[str, Any]:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            f"/rmq.admin.v1.Admin/{method}",
            request_serializer=lambda raw: raw,
            response_deserializer=json.loads,
        )
        return call(json.dumps(fields).encode(), timeout=TIMEOUT_S)  # type: ignore[no-any-return]


def stored(endpoint: str, message_id: str, topic: str) -> dict[str, Any] | None:
    """The newest message with this id stored in ``topic`` itself (admin QueryMessage), or
    None (held copies in the timer or half topic name ``topic`` too, and do not count)."""
    reply = admin_call(endpoint, "QueryMessage", id=message_id, topic=topic, text_bodies=True)
    if reply["status"]["code"] == Code.MESSAGE_NOT_FOUND:
        return None
    assert reply["status"]["code"] == Code.OK, reply
    newest = reply["result"][0]
    return newest if newest["topic"] == topic else None  # type: ignore[no-any-return]


def topic_total(endpoint: str, topic: str) -> int:
    reply = admin_call(endpoint, "TopicStatus", name=topic)
    assert reply["status"]["code"] == Code.OK, reply
    return sum(q["max_offset"] for q in reply["result"])


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    """Poll an external effect (a timer firing, a client callback) until a deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def message(topic: str, body: bytes, **fields: Any) -> Message:
    msg = Message()
    msg.topic, msg.body = topic, body
    for name, value in fields.items():
        if name == "properties":
            for key, prop in value.items():
                msg.add_property(key, prop)
        elif name == "keys":
            for key in value:
                msg.keys = key
        else:
            setattr(msg, name, value)
    return msg


class Checker(TransactionChecker):
    """Answers check-backs with ``resolution`` and records what it was asked."""

    def __init__(self, resolution: int = TransactionResolution.COMMIT) -> None:
        self.resolution = resolution
        self.asked: list[Message] = []
        self.called = threading.Event()

    def check(self, message: Message) -> int:
        self.asked.append(message)
        self.called.set()
        return self.resolution


@pytest.fixture(scope="module")
def stub(broker_process: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker_process.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


@pytest.fixture
def producers(broker_process: BrokerProcess) -> Iterator[Any]:
    """``start(topics, checker=None)`` → a started official Producer, shut down afterwards."""
    started: list[Producer] = []

    def start(topics: list[str], checker: TransactionChecker | None = None) -> Producer:
        for topic in topics:  # an official client's route lookup never creates a topic
            admin_call(broker_process.endpoint, "CreateTopic", name=topic)
        config = ClientConfiguration(broker_process.endpoint, Credentials())
        producer = Producer(config, topics, checker)
        producer.startup()
        started.append(producer)
        return producer

    yield start
    for producer in started:
        producer.shutdown()


# ---- official client --------------------------------------------------------------------------


def test_round_trip_through_the_store(tmp_path) -> None:
    """Normal, FIFO and batched sends land in the store with every field the client set."""
    proc = start_broker(tmp_path)
    try:
        admin_call(proc.endpoint, "CreateTopic", name="rt")
        producer = Producer(ClientConfiguration(proc.endpoint, Credentials()), ["rt"])
        producer.startup()
        try:
            normal = message(
                "rt",
                b"hello",
                tag="TagA",
                keys=["k1", "k2"],
                properties={"color": "red", "size": "L"},
            )
            sent = {producer.send(normal).message_id: normal}
            for i in range(6):
                fifo = message("rt", f"order-{i}".encode(), message_group=f"g{i % 2}")
                sent[producer.send(fifo).message_id] = fifo
        finally:
            producer.shutdown()
    finally:
        assert proc.stop() == 0
    found = read_store(proc, "rt")
    assert set(found) == set(sent)
    first = found[next(iter(sent))]
    assert (first.body, first.tag, sorted(first.keys)) == (b"hello", "TagA", ["k1", "k2"])
    assert first.properties["color"] == "red" and first.properties["size"] == "L"
    assert first.born_timestamp_ms > 0 and first.born_host[0]
    for group in ("g0", "g1"):
        members = [m for m in found.values() if m.properties.get("__SHARDINGKEY") == group]
        assert len({m.queue_id for m in members}) == 1, f"group {group} spread over queues"
        ordered = sorted(members, key=lambda m: m.queue_offset)
        assert [m.body for m in ordered] == [
            f"order-{i}".encode() for i in range(6) if f"g{i % 2}" == group
        ]


def read_store(proc: BrokerProcess, topic: str) -> dict[str, StoredMessage]:
    """Open the stopped broker's store and read every message of ``topic`` by id."""
    config = StoreConfig(
        store_dir=str(proc.store_dir),
        segment_size_bytes=DEFAULT_CONFIG["store"]["segment_size_bytes"],
    )
    store = MessageStore(config)
    report = store.open()
    try:
        assert report is not None
        found: dict[str, StoredMessage] = {}
        for queue_id in range(4):
            high = store.max_offset(topic, queue_id)
            if high:
                for msg in store.get_messages(QueueRead(topic, queue_id, 0, high)).messages:
                    found[msg.message_id] = msg
        return found
    finally:
        store.close()


def test_send_answers_with_the_client_id_and_offset(broker_process, producers) -> None:
    producer = producers(["send-ok"])
    receipts = [producer.send(message("send-ok", b"x%d" % i, keys=[f"key-{i}"])) for i in range(3)]
    for i, receipt in enumerate(receipts):
        got = stored(broker_process.endpoint, receipt.message_id, "send-ok")
        assert got is not None and got["body"] == f"x{i}" and got["keys"] == [f"key-{i}"]
        assert got["queue_offset"] == receipt.offset


def test_delivery_timestamp_is_honoured(broker_process, producers) -> None:
    producer = producers(["delay"])
    due_ms = int(time.time() * 1000) + 2_000
    receipt = producer.send(message("delay", b"later", delivery_timestamp=due_ms))
    assert receipt.recall_handle
    assert stored(broker_process.endpoint, receipt.message_id, "delay") is None
    got = wait_for(
        lambda: stored(broker_process.endpoint, receipt.message_id, "delay"),
        15,
        "the timed message",
    )
    assert time.time() * 1000 >= due_ms and got["store_timestamp_ms"] >= due_ms
    assert got["body"] == "later"


def test_recalled_message_is_never_delivered(broker_process, producers) -> None:
    producer = producers(["recall"])
    due_ms = int(time.time() * 1000) + 1_500
    recalled = producer.send(message("recall", b"cancelled", delivery_timestamp=due_ms))
    witness = producer.send(message("recall", b"witness", delivery_timestamp=due_ms))
    assert producer.recall_message("recall", recalled.recall_handle) == recalled.message_id
    assert producer.recall_message("recall", recalled.recall_handle) == recalled.message_id
    wait_for(
        lambda: stored(broker_process.endpoint, witness.message_id, "recall"),
        15,
        "the witness timed message",
    )
    assert stored(broker_process.endpoint, recalled.message_id, "recall") is None
    with pytest.raises(ClientException) as too_late:
        producer.recall_message("recall", witness.recall_handle)
    assert too_late.value.code == Code.NOT_FOUND


def test_transaction_commit_and_rollback(broker_process, producers) -> None:
    producer = producers(["tx"], Checker(TransactionResolution.ROLLBACK))
    committed_tx = producer.begin_transaction()
    committed = producer.send(message("tx", b"commit me"), committed_tx)
    rolled_back_tx = producer.begin_transaction()
    rolled_back = producer.send(message("tx", b"roll me back"), rolled_back_tx)
    assert committed.transaction_id and rolled_back.transaction_id
    assert stored(broker_process.endpoint, committed.message_id, "tx") is None
    committed_tx.commit()
    rolled_back_tx.rollback()
    got = stored(broker_process.endpoint, committed.message_id, "tx")
    assert got is not None and got["body"] == "commit me"
    assert stored(broker_process.endpoint, rolled_back.message_id, "tx") is None
    with pytest.raises(ClientException):
        rolled_back_tx.commit()  # already ended: the broker refuses
    assert stored(broker_process.endpoint, rolled_back.message_id, "tx") is None


def test_unresolved_transaction_is_checked_back(broker_process, producers) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    producer = producers(["tx-check"], checker)
    transaction = producer.begin_transaction()
    half = message("tx-check", b"forgotten", tag="T", keys=["order-7"], properties={"region": "eu"})
    receipt = producer.send(half, transaction)
    assert checker.called.wait(15), "the broker never asked the producer"
    asked = checker.asked[0]
    assert (asked.message_id, asked.topic, asked.body) == (
        receipt.message_id,
        "tx-check",
        b"forgotten",
    )
    assert asked.tag == "T" and asked.keys == {"order-7"} and asked.properties == {"region": "eu"}
    assert not asked.corrupted
    got = wait_for(
        lambda: stored(broker_process.endpoint, receipt.message_id, "tx-check"),
        15,
        "the checked transaction to be committed",
    )
    assert got["body"] == "forgotten" and got["properties"]["region"] == "eu"


def test_check_back_reaches_a_producer_that_named_no_topics(broker_process, producers) -> None:
    checker = Checker(TransactionResolution.ROLLBACK)
    admin_call(broker_process.endpoint, "CreateTopic", name="tx-late")
    producer = producers([], checker)  # learns of the topic only when it sends
    receipt = producer.send(message("tx-late", b"undecided"), producer.begin_transaction())
    assert checker.called.wait(15), "the broker never asked the producer"
    assert checker.asked[0].message_id == receipt.message_id
    assert stored(broker_process.endpoint, receipt.message_id, "tx-late") is None


# ---- raw protobuf requests ------------------------------------------------------------------


def proto_message(topic: str, body: bytes, message_id: str, **system: Any) -> Any:
    system.setdefault("message_type", pb.MessageType.NORMAL)
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=message_id, **system),
    )


def send(stub: Any, *messages: Any) -> Any:
    request = service_pb2.SendMessageRequest(messages=list(messages))
    return stub.SendMessage(request, metadata=[("x-mq-client-id", "raw")], timeout=TIMEOUT_S)


def test_many_messages_in_one_request(broker_process, stub) -> None:
    messages = [proto_message("batch", b"m%d" % i, f"BATCH{i:04d}") for i in range(40)]
    messages.append(
        proto_message(
            "batch", b"fifo", "BATCH-FIFO", message_group="g", message_type=pb.MessageType.FIFO
        )
    )
    reply = send(stub, *messages)
    assert reply.status.code == Code.OK
    assert [e.message_id for e in reply.entries] == [
        m.system_properties.message_id for m in messages
    ]
    assert all(e.status.code == Code.OK for e in reply.entries)
    assert topic_total(broker_process.endpoint, "batch") == 41
    assert stored(broker_process.endpoint, "BATCH0039", "batch")["body"] == "m39"


def test_timestamps_in_seconds_and_gzip_bodies(broker_process, stub) -> None:
    due = Timestamp(seconds=int(time.time()) - 5)  # already due: delivered at once
    body = b"compressed " * 100
    reply = send(
        stub,
        proto_message(
            "raw-misc",
            gzip.compress(body),
            "RAW-GZIP",
            body_encoding=pb.Encoding.GZIP,
            delivery_timestamp=due,
            message_type=pb.MessageType.DELAY,
        ),
    )
    assert reply.status.code == Code.OK, reply.status
    assert stored(broker_process.endpoint, "RAW-GZIP", "raw-misc")["body"] == body.decode()


def digest(body: bytes) -> Any:
    return pb.Digest(type=pb.DigestType.CRC32, checksum=f"{zlib.crc32(body):08X}")


def test_body_digest_is_verified(broker_process, stub) -> None:
    good = proto_message("digest", b"intact", "DIGEST-OK", body_digest=digest(b"intact"))
    assert send(stub, good).status.code == Code.OK
    bad = proto_message("digest", b"damaged", "DIGEST-BAD", body_digest=digest(b"intact"))
    reply = send(stub, bad)
    assert reply.status.code == Code.MESSAGE_CORRUPTED and "digest" in reply.status.message
    assert stored(broker_process.endpoint, "DIGEST-BAD", "digest") is None


BAD_MESSAGES = {
    "empty topic": (proto_message("", b"x", "BAD-1"), Code.ILLEGAL_TOPIC),
    "illegal topic": (proto_message("no spaces", b"x", "BAD-2"), Code.ILLEGAL_TOPIC),
    "5 MiB body": (proto_message("bad", b"x" * (5 * MIB), "BAD-3"), Code.MESSAGE_BODY_TOO_LARGE),
    "empty body": (proto_message("bad", b"", "BAD-4"), Code.MESSAGE_BODY_EMPTY),
    "no message id": (proto_message("bad", b"x", ""), Code.ILLEGAL_MESSAGE_ID),
    "system property": (
        pb.Message(
            topic=pb.Resource(name="bad"),
            body=b"x",
            user_properties={"UNIQ_KEY": "mine"},
            system_properties=pb.SystemProperties(message_id="BAD-5"),
        ),
        Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    "tag with |": (proto_message("bad", b"x", "BAD-6", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    "key with a space": (
        proto_message("bad", b"x", "BAD-13", keys=["a b"]),
        Code.ILLEGAL_MESSAGE_KEY,
    ),
    "transaction with delivery time": (
        proto_message(
            "bad",
            b"x",
            "BAD-7",
            message_type=pb.MessageType.TRANSACTION,
            delivery_timestamp=Timestamp(seconds=int(time.time()) + 60),
        ),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "DELAY without delivery time": (
        proto_message("bad", b"x", "BAD-8", message_type=pb.MessageType.DELAY),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "FIFO without group": (
        proto_message("bad", b"x", "BAD-9", message_type=pb.MessageType.FIFO),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "delay level property": (
        pb.Message(
            topic=pb.Resource(name="bad"),
            body=b"x",
            user_properties={"DELAY": "3"},
            system_properties=pb.SystemProperties(
                message_id="BAD-12",
                message_type=pb.MessageType.DELAY,
                delivery_timestamp=Timestamp(seconds=int(time.time()) + 60),
            ),
        ),
        Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    "LITE without lite topic": (
        proto_message("bad", b"x", "BAD-10", message_type=pb.MessageType.LITE),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "lite message to a MIXED topic": (
        proto_message("bad", b"x", "BAD-14", message_type=pb.MessageType.LITE, lite_topic="l1"),
        Code.BAD_REQUEST,
    ),
    "bad lite topic name": (
        proto_message("bad", b"x", "BAD-15", message_type=pb.MessageType.LITE, lite_topic="a b"),
        Code.ILLEGAL_LITE_TOPIC,
    ),
    "priority with message group": (
        proto_message(
            "bad", b"x", "BAD-16", message_type=pb.MessageType.FIFO, priority=3, message_group="g"
        ),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    "corrupt gzip": (
        proto_message("bad", b"not gzip", "BAD-11", body_encoding=pb.Encoding.GZIP),
        Code.MESSAGE_CORRUPTED,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MESSAGES))
def test_bad_message_fails_the_whole_request(broker_process, stub, case) -> None:
    bad, code = BAD_MESSAGES[case]
    admin_call(broker_process.endpoint, "CreateTopic", name="bad-batch")
    before = topic_total(broker_process.endpoint, "bad-batch")
    good = proto_message("bad-batch", b"fine", f"GOOD-BEFORE-{case}".replace(" ", "-"))
    reply = send(stub, good, bad)
    assert reply.status.code == code, reply.status
    assert reply.status.message and not reply.entries
    assert topic_total(broker_process.endpoint, "bad-batch") == before


def test_request_without_messages(stub) -> None:
    assert send(stub).status.code == Code.BAD_REQUEST


def test_topic_type_and_permission_are_enforced(broker_process, stub) -> None:
    assert (
        admin_call(broker_process.endpoint, "CreateTopic", name="only-fifo", message_type="FIFO")[
            "status"
        ]["code"]
        == Code.OK
    )
    assert (
        admin_call(broker_process.endpoint, "CreateTopic", name="read-only", perm=4)["status"][
            "code"
        ]
        == Code.OK
    )
    assert send(stub, proto_message("only-fifo", b"x", "TYPE-1")).status.code == Code.BAD_REQUEST
    fifo = proto_message(
        "only-fifo", b"x", "TYPE-2", message_group="g", message_type=pb.MessageType.FIFO
    )
    assert send(stub, fifo).status.code == Code.OK
    assert send(stub, proto_message("read-only", b"x", "PERM-1")).status.code == Code.FORBIDDEN


def end_transaction(
    stub: Any,
    topic: str,
    message_id: str,
    transaction_id: str,
    resolution: int = TransactionResolution.COMMIT,
) -> Any:
    request = service_pb2.EndTransactionRequest(
        topic=pb.Resource(name=topic),
        message_id=message_id,
        transaction_id=transaction_id,
        resolution=resolution,
        source=pb.TransactionSource.SOURCE_CLIENT,
    )
    return stub.EndTransaction(request, timeout=TIMEOUT_S)


def test_end_transaction_of_unknown_or_wrong_ids(broker_process, stub) -> None:
    reply = end_transaction(stub, "raw-tx", "NO-SUCH-MESSAGE", "NO-SUCH-TX")
    assert reply.status.code == Code.MESSAGE_NOT_FOUND
    half = proto_message("raw-tx", b"half", "RAW-TX-1", message_type=pb.MessageType.TRANSACTION)
    sent = send(stub, half)
    assert sent.status.code == Code.OK and sent.entries[0].transaction_id
    wrong = end_transaction(stub, "raw-tx", "RAW-TX-1", "NOT-ITS-TX")
    assert wrong.status.code == Code.INVALID_TRANSACTION_ID
    assert "transaction" in wrong.status.message
    assert end_transaction(stub, "raw-tx", "RAW-TX-1", "").status.code == (
        Code.INVALID_TRANSACTION_ID
    )
    unspecified = end_transaction(
        stub,
        "raw-tx",
        "RAW-TX-1",
        sent.entries[0].transaction_id,
        pb.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
    )
    assert unspecified.status.code == Code.BAD_REQUEST
    done = end_transaction(
        stub, "raw-tx", "RAW-TX-1", sent.entries[0].transaction_id, TransactionResolution.ROLLBACK
    )
    assert done.status.code == Code.OK
    assert stored(broker_process.endpoint, "RAW-TX-1", "raw-tx") is None


def test_recall_of_bad_handles(stub) -> None:
    def recall(handle: str) -> Any:
        request = service_pb2.RecallMessageRequest(
            topic=pb.Resource(name="recall"), recall_handle=handle
        )
        return stub.RecallMessage(request, timeout=TIMEOUT_S)

    assert recall("").status.code == Code.BAD_REQUEST
    assert recall("bad handle\x01").status.code == Code.BAD_REQUEST
    assert recall("0123456789ABCDEF").status.code == Code.NOT_FOUND
