"""One send path: whichever way messages arrive, the store holds the same bytes.

The same messages go into three brokers: through the official ``SendMessage`` handler
(requests of 32 or more plain messages are converted by ``convert_columns``, smaller ones
by ``convert_in``), through the ``SendBulk`` handler (``convert_bulk``), and through the
store API (``MessageStore.put_messages`` of ``Message`` objects, what retry, DLQ, timer and
transaction internals use). Below the converters there is one batch type and one path,
so the commitlog bytes (from the first unit's physical offset to the end), the consume
queue files and the index files must be equal byte for byte.

Store timestamps are pinned, not normalised: every broker gets the same injected clock
(``Broker(clock_ms=...)``), and every message carries its born time, so no wall-clock
time reaches a unit, a consume queue or an index entry. Only index file *names* (and so
the index manifest) come from the wall clock when the file is made: those are compared
by position, not name.

The converters stay two (protobuf → batch, bulk frame → batch), sharing their checks:
the last tests check that a request the column converter does not take is one the
general converter handles, accepting or refusing it whole.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.errors import RocketMQError
from broker_core.message import Message
from broker_core.protocol.bulk_send import decode_response, encode_request
from broker_core.server.context import ServerContext
from broker_core.server.convert_columns import to_columns
from broker_core.server.convert_in import Limits, to_messages
from broker_core.server.handlers.send import send_bulk, send_message
from broker_core.store.columns import queue_blocks
from tests.store.conftest import small_config

T0 = 1_700_000_000_000
PEER = ("10.1.2.3", 40_000)
BORN_HOST = "10.0.0.7"
LIMITS = Limits(16 * 1024, 4 * 1024)
QUEUES = 4
WAYS = ("official", "bulk", "store_api")
REQUEST_SIZES = (1, 37, 300, 5, 31, 64)  # both SendMessage converters; 300 spills a segment


class Peer:
    """The one thing the send handlers ask of ``grpc.ServicerContext``: the peer."""

    def peer(self) -> str:
        return f"ipv4:{PEER[0]}:{PEER[1]}"

    def invocation_metadata(self) -> list[Any]:
        return []


def message(topic: str, body: bytes, message_id: str, **system: Any) -> Any:
    user = system.pop("user", None)
    digest = system.pop("digest", f"{zlib.crc32(body):08X}")
    props = pb.SystemProperties(
        message_id=message_id, message_type=pb.MessageType.NORMAL, born_host=BORN_HOST, **system
    )
    if digest is not None:
        props.body_digest.type = pb.DigestType.CRC32
        props.body_digest.checksum = digest
    return pb.Message(
        topic=pb.Resource(name=topic), body=body, user_properties=user, system_properties=props
    )


def plain_batch(count: int, topic: str = "lanes", first: int = 0) -> list[Any]:
    """Every shape a plain message takes: tags or none, keys, user properties, text."""
    out = []
    for i in range(first, first + count):
        extra: dict[str, Any] = {}
        if i % 3:
            extra["tag"] = f"tag-{i % 5}"
        if i % 4 == 1:
            extra["keys"] = [f"order-{i}", "shared", f"é-{i}"]
        if i % 5 == 2:  # one user property each: a protobuf map's order is not defined,
            # so two keys could be stored in either order by any converter
            extra["user"] = {"region": "eu"} if i % 2 else {"note": f"ünïcode {i}"}
        if i % 7 == 3:
            extra["born_timestamp"] = Timestamp(seconds=1_700_000_000, nanos=5_000_000)
        body = (b"%05d|" % i) * (1 + i % 40)
        out.append(message(topic, body, f"ID{i:08d}", **extra))
    return out


def born_at_t0(protos: list[Any]) -> list[Any]:
    """The messages with born time T0 (a bulk frame has one born time per request)."""
    for proto in protos:
        proto.system_properties.born_timestamp.CopyFrom(Timestamp(seconds=T0 // 1000))
    return protos


def properties_of(proto: Any) -> dict[str, str]:
    """The properties SendMessage stores for a plain message, in the order it stores them."""
    sp = proto.system_properties
    props = {"UNIQ_KEY": sp.message_id}
    if sp.tag:
        props["TAGS"] = sp.tag
    if sp.keys:
        props["KEYS"] = " ".join(sp.keys)
    props.update(proto.user_properties)
    return props


def frame_of(protos: list[Any]) -> bytes:
    """The bulk frame of plain protobuf messages (one born time and host per batch)."""
    props = [
        "".join(f"{k}\x01{v}\x02" for k, v in properties_of(proto).items()).encode()
        for proto in protos
    ]
    return encode_request(
        protos[0].topic.name,
        [p.body for p in protos],
        props,
        born_timestamp_ms=T0,
        born_host=BORN_HOST,
    )


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[str, Broker]]:
    made = {
        way: Broker(
            BrokerConfig(default_queue_nums=QUEUES),
            small_config(tmp_path / way),
            clock_ms=lambda: T0,
        )
        for way in WAYS
    }
    for b in made.values():
        b.start()
    yield made
    for b in made.values():
        if b.store.is_open:
            b.stop()


def send_official(broker: Broker, protos: list[Any]) -> list[int]:
    ctx = ServerContext(broker, "127.0.0.1:1", "lanes")
    request = service_pb2.SendMessageRequest(messages=protos)
    response = send_message(ctx, request, Peer())  # type: ignore[arg-type]
    return [entry.offset for entry in response.entries]


def send_bulk_frame(broker: Broker, protos: list[Any]) -> list[int]:
    ctx = ServerContext(broker, "127.0.0.1:1", "lanes")
    status, offsets = decode_response(send_bulk(ctx, frame_of(protos), Peer()))  # type: ignore[arg-type]
    assert status["code"] == pb.Code.OK, status
    return list(offsets)


def send_store_api(broker: Broker, protos: list[Any], sent_before: int) -> list[int]:
    """``put_messages`` with the queues the broker would have chosen (round robin's counts
    per queue, in contiguous blocks: ``store.columns.queue_blocks``)."""
    queues, sizes = queue_blocks(len(protos), sent_before + 1, QUEUES)
    queue_ids = np.repeat(queues, sizes).tolist()
    messages = [
        Message(
            proto.topic.name,
            proto.body,
            queue_id=queue_ids[i],
            properties=properties_of(proto),
            born_timestamp_ms=T0,
            born_host=(BORN_HOST, PEER[1]),
        )
        for i, proto in enumerate(protos)
    ]
    return [put.queue_offset for put in broker.store.put_messages(messages)]


def stored_files(root: Path, part: str) -> dict[str, bytes]:
    base = root / part
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def index_contents(root: Path) -> tuple[list[bytes], Any]:
    """The index files' bytes in name order, and the manifest without the names: files
    are named by the wall clock when they are created, the only time not pinned."""
    files = stored_files(root, "index")
    manifest = json.loads(files.pop("manifest.json", "null"))  # written once a file is sealed
    files.pop("manifest.json.bak", None)
    if manifest is not None:
        for sealed in manifest["data"]["sealed"]:
            del sealed["name"]
        del manifest["crc32"]
    return [files[name] for name in sorted(files)], manifest


def commitlog_bytes(root: Path, first_unit: int, end: int) -> bytes:
    """The log's bytes from its first unit to its end, across segment files."""
    data = b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))
    return data[first_unit:end]


def test_every_way_in_stores_the_same_bytes(brokers: dict[str, Broker], tmp_path: Path) -> None:
    sent = 0
    for size in REQUEST_SIZES:
        protos = born_at_t0(plain_batch(size, first=sent))
        offsets = {
            "official": send_official(brokers["official"], protos),
            "bulk": send_bulk_frame(brokers["bulk"], protos),
            "store_api": send_store_api(brokers["store_api"], protos, sent),
        }
        assert offsets["official"] == offsets["bulk"] == offsets["store_api"], size
        sent += size
    ends = set()
    for b in brokers.values():
        assert b.store.wait_dispatched()
        ends.add(b.store.commitlog.max_offset)
        assert len(b.store.commitlog.segments()) > 1
        first_unit = b.store.query_by_key("ID00000000", topic="lanes")[0].physical_offset
        assert first_unit == 0
    assert len(ends) == 1
    for key in ("ID00000001", "shared", "order-5", "é-9"):
        answers = [b.query_by_key("lanes", key, max_results=50) for b in brokers.values()]
        assert answers[0] and answers[0] == answers[1] == answers[2], key
    for b in brokers.values():
        b.stop()
    end = ends.pop()
    logs = {way: commitlog_bytes(tmp_path / way, 0, end) for way in WAYS}
    assert logs["official"] == logs["bulk"] == logs["store_api"]
    queues = {way: stored_files(tmp_path / way, "consumequeue") for way in WAYS}
    assert queues["official"] and queues["official"] == queues["bulk"] == queues["store_api"]
    indexes = {way: index_contents(tmp_path / way) for way in WAYS}
    assert indexes["official"] and indexes["official"] == indexes["bulk"] == indexes["store_api"]


def test_the_general_converter_stores_what_the_column_converter_stores(
    brokers: dict[str, Broker], tmp_path: Path
) -> None:
    """Born times per message (not one per request): SendMessage's two converters."""
    for size in (40, 3):
        protos = plain_batch(size)
        batch = to_columns(protos, limits=LIMITS, peer=PEER, now_ms=T0)
        assert batch is not None, "a plain batch must be taken by the column converter"
        columns = brokers["bulk"].sending.send_batch(batch).queue_offsets.tolist()
        messages = to_messages(protos, limits=LIMITS, peer=PEER, now_ms=T0)
        assert columns == [r.queue_offset for r in brokers["official"].sending.send(messages)]
    for way in ("bulk", "official"):
        brokers[way].stop()
    for part in ("commitlog", "consumequeue"):
        assert stored_files(tmp_path / "bulk", part) == stored_files(tmp_path / "official", part)
    assert index_contents(tmp_path / "bulk") == index_contents(tmp_path / "official")


BAD_OR_UNUSUAL = {
    "blank id": lambda: message("lanes", b"x", "   "),
    "long id": lambda: message("lanes", b"x", "I" * 129),
    "reserved char in tag": lambda: message("lanes", b"x", "ID1", tag="a\x01b"),
    "empty tag set": lambda: message("lanes", b"x", "ID1", tag=""),
    "bar in tag": lambda: message("lanes", b"x", "ID1", tag="a|b"),
    "space in key": lambda: message("lanes", b"x", "ID1", keys=["a b"]),
    "system key as user property": lambda: message("lanes", b"x", "ID1", user={"KEYS": "k"}),
    "reserved char in value": lambda: message("lanes", b"x", "ID1", user={"k": "a\x02"}),
    "oversize body": lambda: message("lanes", b"x" * (16 * 1024 + 1), "ID1"),
    "empty body": lambda: message("lanes", b"", "ID1"),
    "digest mismatch": lambda: message("lanes", b"x", "ID1", digest="00000000"),
    "lower-case digest": lambda: message("lanes", b"x", "ID1", digest=f"{zlib.crc32(b'x'):08x}"),
    "empty digest": lambda: message("lanes", b"x", "ID1", digest=""),
    "message group": lambda: message("lanes", b"x", "ID1", message_group="g"),
    "gzip body": lambda: message(
        "lanes", gzip.compress(b"x"), "ID1", digest=None, body_encoding=pb.Encoding.GZIP
    ),
    "bad topic": lambda: message("no spaces", b"x", "ID1"),
    "big properties": lambda: message("lanes", b"x", "ID1", user={"k": "v" * 5000}),
}


@pytest.mark.parametrize("case", sorted(BAD_OR_UNUSUAL))
def test_unusual_requests_go_to_the_general_converter(case: str) -> None:
    protos = [*plain_batch(3), BAD_OR_UNUSUAL[case]()]
    assert to_columns(protos, limits=LIMITS, peer=PEER, now_ms=T0) is None


def test_a_delivery_time_or_second_topic_goes_to_the_general_converter() -> None:
    timed = message("lanes", b"x", "ID1")
    timed.system_properties.delivery_timestamp.seconds = 0  # set, even if zero
    other = plain_batch(1, topic="other")
    for protos in ([*plain_batch(2), timed], [*plain_batch(2), *other]):
        assert to_columns(protos, limits=LIMITS, peer=PEER, now_ms=T0) is None


@pytest.mark.parametrize(
    "case",
    ["blank id", "digest mismatch", "system key as user property", "oversize body", "space in key"],
)
def test_what_the_general_converter_refuses_stores_nothing(
    brokers: dict[str, Broker], case: str
) -> None:
    protos = [*plain_batch(40), BAD_OR_UNUSUAL[case]()]
    with pytest.raises(RocketMQError):
        send_official(brokers["official"], protos)
    assert brokers["official"].store.commitlog.max_offset == 0  # nothing of the batch was stored
