"""SendBulk refuses what SendMessage refuses, whole; our client uses it over real gRPC.

That a bulk send stores exactly what SendMessage and the store API store is
``test_send_lanes.py``'s test of the one send path. Here: bad frames are refused before
anything is stored, and over real gRPC our client takes SendBulk when the broker offers
it and falls back to SendMessage when not.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.client import RocketMQClient
from broker_core.client.columnar import decode_units
from broker_core.config import BrokerConfig
from broker_core.errors import (
    InvalidMessageIdError,
    InvalidPropertyError,
    InvalidTagError,
    InvalidTopicError,
    MessageCorruptedError,
    MessageTooLargeError,
    RocketMQError,
)
from broker_core.message import tag_hash
from broker_core.protocol import unit as layout
from broker_core.protocol.bulk_send import decode_request, encode_request
from broker_core.server.convert_bulk import to_column_batch
from tests.server.conftest import BrokerProcess
from tests.server.test_send_lanes import LIMITS, PEER, T0
from tests.store.conftest import small_config

WAYS = ("bulk", "official", "store_api")


def send_bulk(broker: Broker, frame: bytes) -> list[int]:
    batch = to_column_batch(decode_request(frame), limits=LIMITS, peer=PEER, now_ms=T0)
    return broker.sending.send_batch(batch).queue_offsets.tolist()


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[str, Broker]]:
    made = {
        way: Broker(
            BrokerConfig(default_queue_nums=4), small_config(tmp_path / way), clock_ms=lambda: T0
        )
        for way in WAYS
    }
    for b in made.values():
        b.start()
    yield made
    for b in made.values():
        b.stop()


def _props(i: int) -> bytes:
    return f"UNIQ_KEY\x01ID{i}\x02".encode()


BAD_FRAMES = {
    "no message id": (InvalidMessageIdError, [b"TAGS\x01a\x02"]),
    "system key": (InvalidPropertyError, [b"UNIQ_KEY\x01ID\x02DELAY\x013\x02"]),
    "bar in tag": (InvalidTagError, [b"UNIQ_KEY\x01ID\x02TAGS\x01a|b\x02"]),
    "no trailing separator": (InvalidPropertyError, [b"UNIQ_KEY\x01ID"]),
    "not utf-8": (MessageCorruptedError, [b"UNIQ_KEY\x01\xff\x02"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_bad_properties_refuse_the_whole_batch(brokers: dict[str, Broker], case: str) -> None:
    error, props = BAD_FRAMES[case]
    frame = encode_request(
        "lanes", [b"a", b"b"], [_props(0), *props], born_timestamp_ms=T0, born_host="10.0.0.7"
    )
    with pytest.raises(error):
        send_bulk(brokers["bulk"], frame)
    assert brokers["bulk"].store.commitlog.max_offset == 0


def test_a_body_crc_mismatch_or_cut_frame_is_refused(brokers: dict[str, Broker]) -> None:
    frame = bytearray(
        encode_request("lanes", [b"abc"], [_props(0)], born_timestamp_ms=T0, born_host="10.0.0.7")
    )
    body_at = frame.index(b"abc")
    frame[body_at] ^= 0x01
    with pytest.raises(MessageCorruptedError, match="CRC"):
        send_bulk(brokers["bulk"], bytes(frame))
    with pytest.raises(MessageCorruptedError):
        send_bulk(brokers["bulk"], bytes(frame[:-1]))
    big = encode_request(
        "lanes",
        [b"x" * (LIMITS.max_body_bytes + 1)],
        [_props(0)],
        born_timestamp_ms=T0,
        born_host="10.0.0.7",
    )
    with pytest.raises(MessageTooLargeError):
        send_bulk(brokers["bulk"], big)
    assert brokers["bulk"].store.commitlog.max_offset == 0


def test_our_client_sends_bulk_and_reads_back(broker_process: BrokerProcess) -> None:
    with RocketMQClient(broker_process.endpoint) as client:
        client.create_topic("bulk-e2e", queues=2)
        receipts = client.send_columns(
            "bulk-e2e",
            [b"m%d" % i for i in range(50)],
            tags=["t"] * 50,
            keys=[[f"k{i}"] for i in range(50)],
            properties=[{"region": "eu"}] * 50,
        )
        assert client.broker.producer.bulk_offered is True
        got = []
        for queue_id in (0, 1):
            got += client.pull("g-bulk", "bulk-e2e", queue_id, 0, 100).messages
        assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(50))
        assert {m.tag for m in got} == {"t"} and {m.properties["region"] for m in got} == {"eu"}
        assert sorted(m.message_id for m in got) == sorted(r.message_id for r in receipts)
        with pytest.raises(RocketMQError):
            client.send_columns("bulk-e2e", [b"x" * (5 << 20)])


def test_our_client_falls_back_to_send_message() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.noop_broker"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with RocketMQClient(f"127.0.0.1:{port}") as client:
            assert len(client.send_batch("t", [b"a", b"b"])) == 2
            assert client.broker.producer.bulk_offered is False
            assert len(client.send_columns("t", [b"c"])) == 1
    finally:
        proc.kill()
        proc.wait()


def test_the_units_of_a_frame_verify_as_they_stand() -> None:
    """Open fields zero and unit CRCs computed so: readers' checks pass on them as sent."""
    bodies = [b"abc", b"de" * 300]
    frame = encode_request(
        "t", bodies, [_props(0), _props(1) + b"TAGS\x01x\x02"], born_timestamp_ms=1, born_host="h"
    )
    req = decode_request(frame)
    columns = decode_units(bytes(req.units), req.sizes)  # checks body and unit CRCs
    assert columns.body.to_pylist() == bodies and columns.born_timestamp_ms.tolist() == [1, 1]
    second = layout.HEADER.unpack_from(req.units, int(req.sizes[0]))
    assert (second[3], second[-2]) == (zlib.crc32(bodies[1]), tag_hash("x"))


@pytest.mark.parametrize("ids", [["ID1", "ID2"], ["ID1", "é-2"], ["I" * 128, "x"]])
def test_ids_alone_are_read_as_arrays_or_parsed_alike(ids: list[str]) -> None:
    props = [f"UNIQ_KEY\x01{i}\x02".encode() for i in ids]
    frame = encode_request("lanes", [b"a", b"b"], props, born_timestamp_ms=T0, born_host="10.0.0.7")
    batch = to_column_batch(decode_request(frame), limits=LIMITS, peer=PEER, now_ms=T0)
    assert batch.index_keys == [[i] for i in ids] and batch.head["tags_code"].tolist() == [0, 0]


@pytest.mark.parametrize("bad_id", ["   ", "", "I" * 129, "a\x01b"])
def test_a_bad_id_alone_is_refused(bad_id: str) -> None:
    props = [_props(0), f"UNIQ_KEY\x01{bad_id}\x02".encode()]
    frame = encode_request("lanes", [b"a", b"b"], props, born_timestamp_ms=T0, born_host="10.0.0.7")
    with pytest.raises((InvalidMessageIdError, InvalidPropertyError)):
        to_column_batch(decode_request(frame), limits=LIMITS, peer=PEER, now_ms=T0)


@pytest.mark.parametrize("other", ["lanez", "lanes-longer", "l"])
def test_units_of_another_topic_are_refused_whatever_its_length(other: str) -> None:
    frame = encode_request(
        other, [b"a", b"b"], [_props(0), _props(1)], born_timestamp_ms=T0, born_host="h"
    )
    req = dataclasses.replace(decode_request(frame), topic="lanes")
    with pytest.raises(InvalidTopicError, match="unit 0 is not of the request's topic"):
        to_column_batch(req, limits=LIMITS, peer=PEER, now_ms=T0)
