"""Malformed SendBulk frames, over real gRPC to a real broker: each refused whole, named.

Every frame here is a good frame with one lie in it (re-sealed with a fresh frame CRC,
but for the damaged one, so the lie reaches the unit checks). The answer must carry the
error's status code and name the first bad unit; afterwards no queue of either topic has
grown. A good frame then stores, and its units read back through the official pull.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.client import RocketMQClient
from broker_core.client.bulk import SEND_PATH
from broker_core.client.columnar import decode_units
from broker_core.errors import (
    InvalidTopicError,
    MessageCorruptedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    RocketMQError,
    UnsupportedError,
)
from broker_core.protocol import unit as layout
from broker_core.protocol.bulk_send import HEADER_LENGTH, decode_response, encode_request
from broker_core.protocol.status import status_of
from tests.server.conftest import BrokerProcess, start_broker

TOPIC, OTHER = "bulk-ok", "bulk-no"  # one length: a unit of one passes for the other's size
MAX_BODY, MAX_PROPS = 1024, 256
COUNT = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    limits = {"max_body_bytes": MAX_BODY, "max_properties_bytes": MAX_PROPS}
    proc = start_broker(tmp_path_factory.mktemp("bulk-frames"), config={"store": limits})
    with RocketMQClient(proc.endpoint) as client:
        client.create_topic(TOPIC, queues=2)
        client.create_topic(OTHER, queues=2)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def send(broker: BrokerProcess) -> Iterator[Callable[[bytes], tuple[dict[str, Any], list[int]]]]:
    channel = grpc.insecure_channel(broker.endpoint)
    call = channel.unary_unary(SEND_PATH)
    yield lambda frame: decode_response(call(frame, timeout=10))
    channel.close()


def good_frame(topic: str = TOPIC, body: bytes = b"body", props: bytes = b"") -> bytearray:
    return bytearray(
        encode_request(
            topic,
            [body] * COUNT,
            [b"UNIQ_KEY\x01ID%d\x02" % i + props for i in range(COUNT)],
            born_timestamp_ms=1_700_000_000_000,
            born_host="10.0.0.7",
        )
    )


def reseal(frame: bytearray) -> bytes:
    """The frame with its CRC made right again (the lie stays)."""
    frame[1:5] = struct.pack(">I", zlib.crc32(frame[5:]))
    return bytes(frame)


def unit_at(frame: bytearray, row: int) -> int:
    """Where unit ``row`` starts in ``frame``."""
    (length,) = HEADER_LENGTH.unpack_from(frame, 5)
    pos = 9 + length + 4 * COUNT
    for _ in range(row):
        (size,) = struct.unpack_from(">i", frame, pos)
        pos += size
    return pos


def patched(field: str, value: int, row: int) -> bytes:
    frame = good_frame()
    kind = dict((name, code) for name, code, _ in layout.FIELDS)[field]
    struct.pack_into(">" + kind, frame, unit_at(frame, row) + layout.field_pos(field), value)
    return reseal(frame)


def bad_crc() -> bytes:
    frame = good_frame()
    frame[unit_at(frame, 1) + layout.HEADER_SIZE] ^= 1  # a body byte
    return bytes(frame)


def other_topic() -> bytes:
    frame = good_frame(OTHER)
    at = frame.index(OTHER.encode())  # the JSON header's topic, not the units'
    frame[at : at + len(TOPIC)] = TOPIC.encode()
    return reseal(frame)


def sizes_lie() -> bytes:
    frame = good_frame()
    (length,) = HEADER_LENGTH.unpack_from(frame, 5)
    struct.pack_into(">i", frame, 9 + length, 200)  # unit 0 declared shorter
    return reseal(frame)


def old_version() -> bytes:
    frame = good_frame()
    frame[0] = 1
    return bytes(frame)


CASES: dict[str, tuple[Callable[[], bytes], type[RocketMQError], str]] = {
    "bad frame CRC": (bad_crc, MessageCorruptedError, "frame CRC"),
    "unit length lies": (
        lambda: patched("total_size", 500, 2),
        MessageCorruptedError,
        "unit 2 size",
    ),
    "declared sizes lie": (sizes_lie, MessageCorruptedError, "sizes add up"),
    "body length lies": (
        lambda: patched("body_length", 9, 1),
        MessageCorruptedError,
        "unit 1 lengths (body, topic, properties) do not add up",
    ),
    "wrong topic bytes": (other_topic, InvalidTopicError, "unit 0 is not of the request's topic"),
    "oversize body": (
        lambda: reseal(good_frame(body=b"x" * (MAX_BODY + 1))),
        MessageTooLargeError,
        "unit 0 has a body over the limit of 1024",
    ),
    "oversize properties": (
        lambda: reseal(good_frame(props=b"region\x01" + b"e" * MAX_PROPS + b"\x02")),
        PropertiesTooLargeError,
        "unit 0 has properties over the limit of 256",
    ),
    "bad magic": (
        lambda: patched("magic", 0x0BADBAD0, 3),
        MessageCorruptedError,
        "unit 3 has a bad magic",
    ),
    "broker field set": (
        lambda: patched("queue_offset", 7, 1),
        MessageCorruptedError,
        "unit 1 sets queue_offset",
    ),
    "wrong version": (old_version, UnsupportedError, "version 1 is not supported"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_frame_is_refused_whole_and_named(
    broker: BrokerProcess, send: Callable[[bytes], tuple[dict[str, Any], list[int]]], case: str
) -> None:
    make, error, named = CASES[case]
    status, offsets = send(make())
    assert status["code"] == status_of(error("x")).code, status
    assert named in status["message"] and offsets == []
    with RocketMQClient(broker.endpoint) as client:
        for topic in (TOPIC, OTHER):
            assert {q["max_offset"] for q in client.topic_status(topic)} == {0}, (case, topic)


def test_a_good_frame_stores_and_reads_back(
    broker: BrokerProcess, send: Callable[[bytes], tuple[dict[str, Any], list[int]]]
) -> None:
    status, offsets = send(bytes(good_frame(OTHER)))
    assert status["code"] == pb.Code.OK and sorted(offsets) == [0, 0, 1, 1]
    with RocketMQClient(broker.endpoint) as client:
        got = [m for q in (0, 1) for m in client.pull("g-frames", OTHER, q, 0, 10).messages]
        assert sorted(m.message_id for m in got) == [f"ID{i}" for i in range(COUNT)]
        assert {(m.body, m.born_host) for m in got} == {(b"body", "10.0.0.7")}
        for queue_id in (0, 1):  # the stored units verify: their CRCs were patched right
            raw = client.pull_raw("g-frames", OTHER, queue_id, 0, 10)
            assert len(decode_units(raw.data, raw.sizes).body) == 2


def test_the_lies_reach_the_unit_checks() -> None:
    """The re-sealed frames pass the frame CRC (else every case would test only it)."""
    for case, (make, _, _) in CASES.items():
        frame = make()
        if case not in ("bad frame CRC", "wrong version"):
            assert zlib.crc32(frame[5:]) == struct.unpack_from(">I", frame, 1)[0], case
