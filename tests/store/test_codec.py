from __future__ import annotations

import pytest

from broker_core.errors import (
    CorruptionError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from broker_core.message import Message, tag_hash
from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.columns import encode_messages
from tests.store.conftest import seal

LIMITS = dict(max_body_bytes=1024, max_properties_bytes=512)


def sealed(msg: Message, phys: int = 4096) -> bytearray:
    unit = seal(msg, 7, phys, 1_700_000_000_123, (b"\x0a\x00\x00\x01", 10911), **LIMITS)
    return bytearray(unit)


def sample() -> Message:
    return Message(
        "orders",
        b"payload-bytes",
        queue_id=3,
        flag=5,
        sys_flag=0,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "user": "v"},
        born_timestamp_ms=1_700_000_000_000,
        born_host=("192.168.1.9", 5555),
        reconsume_times=2,
        prepared_transaction_offset=99,
    )


def test_round_trip_keeps_every_field() -> None:
    data = sealed(sample())
    assert codec.check_unit(data, 0, 4096) == len(data)
    m = codec.decode(data)
    assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset) == ("orders", 3, 7, 4096)
    assert m.body == b"payload-bytes"
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "user": "v"}
    assert (m.flag, m.reconsume_times, m.prepared_transaction_offset) == (5, 2, 99)
    assert m.born_timestamp_ms == 1_700_000_000_000
    assert m.store_timestamp_ms == 1_700_000_000_123
    assert m.born_host == ("192.168.1.9", 5555)
    assert m.store_host == ("10.0.0.1", 10911)
    assert m.tag == "TagA" and m.keys == ["k1", "k2"] and m.message_id == "ABC"
    assert m.stored_size == len(data)


def test_every_single_byte_flip_is_detected() -> None:
    data = sealed(sample())
    for i in range(len(data)):
        broken = bytearray(data)
        broken[i] ^= 0x5A
        with pytest.raises(CorruptionError):
            codec.check_unit(broken, 0, 4096)


def test_unit_at_the_wrong_offset_is_detected() -> None:
    data = sealed(sample(), phys=4096)
    with pytest.raises(CorruptionError, match="expected 8192"):
        codec.check_unit(data, 0, 8192)


def test_dispatch_request_reads_keys_and_tag_code() -> None:
    req = codec.dispatch_request(sealed(sample()), 0)
    assert (req.topic, req.queue_id, req.queue_offset) == ("orders", 3, 7)
    assert req.keys == ["ABC", "k1", "k2"]
    assert req.tags_code == tag_hash("TagA") != 0


def test_dispatch_request_ignores_look_alike_property_names() -> None:
    msg = Message("t", b"x", properties={"MYKEYS": "no", "XUNIQ_KEY": "no"})
    assert codec.dispatch_request(sealed(msg), 0).keys == []


@pytest.mark.parametrize(
    ("msg", "error"),
    [
        (Message("t", b"x" * 1025), MessageTooLargeError),
        (Message("t", b"x", properties={"k": "v" * 600}), PropertiesTooLargeError),
        (Message("t", b"x", properties={"bad\x01name": "v"}), InvalidPropertyError),
        (Message("t", b"x", properties={"k": "bad\x02value"}), InvalidPropertyError),
        (Message("t", b"x", properties={"": "v"}), InvalidPropertyError),
        (Message("", b"x"), InvalidTopicError),
    ],
)
def test_bad_messages_are_refused_before_encoding(msg: Message, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_messages([msg], **LIMITS)


def test_blank_marker_has_size_and_magic() -> None:
    assert layout.SIZE_MAGIC.unpack(codec.blank_unit(300)) == (300, layout.BLANK_MAGIC)


def test_non_string_property_values_are_refused() -> None:
    with pytest.raises(InvalidPropertyError, match="str to str"):
        encode_messages([Message("t", b"x", properties={"k": 1})], **LIMITS)  # type: ignore[dict-item]


def test_properties_round_trip_through_the_fast_path() -> None:
    props = {"a": "", "b": "x y", "ü": "ß", "KEYS": "k1 k2"}
    assert codec.decode_properties(codec.encode_properties(props)) == props
