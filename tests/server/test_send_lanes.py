"""SendMessage's two lanes store the same bytes and refuse the same requests.

Plain batches take the column fast lane (``convert_columns`` + ``Broker.send_columns``);
everything else the general lane (``convert_in.to_messages`` + ``Broker.send``). The
same request sent through each lane into its own broker (same clock, same config) must
leave byte-identical commitlogs and consume queues and the same index answers; and every
request the fast lane does not take must be one the general lane handles.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.errors import RocketMQError
from broker_core.server.convert_columns import to_columns
from broker_core.server.convert_in import Limits, to_messages
from tests.store.conftest import small_config

T0 = 1_700_000_000_000
PEER = ("10.1.2.3", 40_000)
LIMITS = Limits(16 * 1024, 4 * 1024)


def message(topic: str, body: bytes, message_id: str, **system: Any) -> Any:
    user = system.pop("user", None)
    digest = system.pop("digest", f"{zlib.crc32(body):08X}")
    props = pb.SystemProperties(
        message_id=message_id, message_type=pb.MessageType.NORMAL, born_host="10.0.0.7", **system
    )
    if digest is not None:
        props.body_digest.type = pb.DigestType.CRC32
        props.body_digest.checksum = digest
    return pb.Message(
        topic=pb.Resource(name=topic), body=body, user_properties=user, system_properties=props
    )


def plain_batch(count: int, topic: str = "lanes") -> list[Any]:
    """Every shape the fast lane takes: tags or none, keys, user properties, text."""
    out = []
    for i in range(count):
        extra: dict[str, Any] = {}
        if i % 3:
            extra["tag"] = f"tag-{i % 5}"
        if i % 4 == 1:
            extra["keys"] = [f"order-{i}", "shared", f"é-{i}"]
        if i % 5 == 2:
            extra["user"] = {"region": "eu", "note": f"ünïcode {i}"}
        if i % 7 == 3:
            extra["born_timestamp"] = Timestamp(seconds=1_700_000_000, nanos=5_000_000)
        body = (b"%05d|" % i) * (1 + i % 40)
        out.append(message(topic, body, f"ID{i:08d}", **extra))
    return out


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    pair = tuple(
        Broker(
            BrokerConfig(default_queue_nums=4), small_config(tmp_path / name), clock_ms=lambda: T0
        )
        for name in ("fast", "general")
    )
    for b in pair:
        b.start()
    yield pair  # type: ignore[misc]
    for b in pair:
        b.stop()


def send_general(broker: Broker, protos: list[Any]) -> list[int]:
    messages = to_messages(protos, limits=LIMITS, peer=PEER, now_ms=T0)
    return [r.queue_offset for r in broker.send(messages)]


def send_fast(broker: Broker, protos: list[Any]) -> list[int]:
    batch = to_columns(protos, limits=LIMITS, peer=PEER, now_ms=T0)
    assert batch is not None, "a plain batch must take the fast lane"
    return broker.send_columns(batch).tolist()


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_both_lanes_store_the_same_bytes(brokers: tuple[Broker, Broker], tmp_path: Path) -> None:
    fast, general = brokers
    for size in (1, 37, 300, 5):  # 300 messages spill over a 64 KiB commitlog segment
        batch = plain_batch(size)
        assert send_fast(fast, batch) == send_general(general, batch)
    for b in brokers:
        assert b.store.wait_dispatched()
    assert fast.store.commitlog.max_offset == general.store.commitlog.max_offset
    assert len(fast.store.commitlog.segments()) > 1
    for key in ("ID00000001", "shared", "order-5", "é-9"):
        assert fast.query_by_key("lanes", key, max_results=50) == general.query_by_key(
            "lanes", key, max_results=50
        )
    fast.stop()
    general.stop()
    for part in ("commitlog", "consumequeue"):
        assert files(tmp_path / "fast" / part) == files(tmp_path / "general" / part)


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
def test_unusual_requests_take_the_general_lane(case: str) -> None:
    protos = [*plain_batch(3), BAD_OR_UNUSUAL[case]()]
    assert to_columns(protos, limits=LIMITS, peer=PEER, now_ms=T0) is None


def test_a_delivery_time_or_second_topic_takes_the_general_lane() -> None:
    timed = message("lanes", b"x", "ID1")
    timed.system_properties.delivery_timestamp.seconds = 0  # set, even if zero
    other = plain_batch(1, topic="other")
    for protos in ([*plain_batch(2), timed], [*plain_batch(2), *other]):
        assert to_columns(protos, limits=LIMITS, peer=PEER, now_ms=T0) is None


@pytest.mark.parametrize(
    "case",
    ["blank id", "digest mismatch", "system key as user property", "oversize body", "space in key"],
)
def test_what_the_general_lane_refuses_is_refused(
    brokers: tuple[Broker, Broker], case: str
) -> None:
    with pytest.raises(RocketMQError):
        send_general(brokers[1], [*plain_batch(2), BAD_OR_UNUSUAL[case]()])
    assert brokers[1].store.commitlog.max_offset == 0  # nothing of the batch was stored
