"""Producer RPCs against a real broker process with raw protobuf requests: SendMessage
(batches, gzip bodies, digests, every refused message, topic type and permission),
EndTransaction and RecallMessage with wrong ids and handles (the official client:
``test_producer.py``).

What was stored is read back through the broker's admin service while it runs
(QueryMessage by id within the real topic, TopicStatus).
"""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import TransactionResolution
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from tests.server.admin_calls import TIMEOUT_S, admin_call, stored, topic_total
from tests.server.conftest import BrokerProcess

Code = pb.Code
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def stub(broker_process: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker_process.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


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
