"""RocketMQ 4.x message encodings: properties, batch bodies and pull records."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import InvalidArgumentError
from broker_core.message import StoredMessage
from broker_core.protocol.property_codec import decode_text, encode_text
from broker_core.remoting_broker.msgcodec import (
    MESSAGE_MAGIC_CODE,
    decode_batch,
    encode_message,
    uncompress_body,
)
from tests.remoting_records import decode_stored, encode_batch

NAMES = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
VALUES = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20
)
PROPS = st.dictionaries(NAMES, VALUES, max_size=6)


@given(PROPS)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_text(encode_text(props)) == props


@given(
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300), PROPS), min_size=1, max_size=8
    )
)
def test_batch_round_trip(items) -> None:
    assert decode_batch(encode_batch(items)) == [(f, b, p) for f, b, p in items]


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_batch_is_a_clear_error_or_parses(data: bytes) -> None:
    try:
        items = decode_batch(data)
    except InvalidArgumentError as exc:
        assert "batch" in str(exc)
    else:
        assert all(isinstance(body, bytes) and isinstance(props, dict) for _, body, props in items)


def stored(**over) -> StoredMessage:
    values = dict(
        topic="orders",
        queue_id=3,
        queue_offset=41,
        physical_offset=123456,
        body=b"payload",
        properties={"TAGS": "a", "UNIQ_KEY": "ID1"},
        flag=7,
        sys_flag=0,
        born_timestamp_ms=1000,
        born_host=("10.1.2.3", 5555),
        store_timestamp_ms=2000,
        store_host=("127.0.0.1", 8081),
        reconsume_times=2,
        prepared_transaction_offset=0,
        body_crc=0,
        stored_size=0,
    )
    values.update(over)
    return StoredMessage(**values)


def test_pull_record_exact_layout() -> None:
    data = encode_message(stored(), ("127.0.0.1", 10911))
    total, magic, crc, qid, flag, qoff, phys, sysflag = struct.unpack_from(">iIIiiqqi", data)
    assert (total, magic, qid, flag, qoff, phys, sysflag) == (
        len(data),
        MESSAGE_MAGIC_CODE,
        3,
        7,
        41,
        123456,
        0,
    )
    assert crc == zlib.crc32(b"payload") & 0x7FFFFFFF
    assert data[48:56] == bytes([10, 1, 2, 3]) + struct.pack(">i", 5555)  # BORNHOST
    assert data[64:72] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)  # STOREHOST
    (record,) = decode_stored(data)
    assert record["body"] == b"payload" and record["topic"] == "orders"
    assert record["properties"] == {"TAGS": "a", "UNIQ_KEY": "ID1", "MSG_REGION": "DefaultRegion"}
    assert record["reconsume_times"] == 2


def test_a_record_keeps_its_own_region() -> None:
    """Every 4.x record names a region (a traced 4.x consumer skips messages without one);
    a message that has its own keeps it."""
    props = {"TAGS": "a", "MSG_REGION": "eu-1"}
    (record,) = decode_stored(encode_message(stored(properties=props)))
    assert record["properties"] == props


def test_records_concatenate_and_hostnames_fall_back_to_loopback() -> None:
    data = encode_message(stored(born_host=("some-host", 1))) + encode_message(stored(body=b""))
    first, second = decode_stored(data)
    assert first["body"] == b"payload" and second["body"] == b""
    assert data[48:52] == bytes([127, 0, 0, 1])


def test_compressed_bodies_are_inflated() -> None:
    assert uncompress_body(zlib.compress(b"x" * 5000), 0b11) == (b"x" * 5000, 0b10)
    assert uncompress_body(b"plain", 0) == (b"plain", 0)
    with pytest.raises(InvalidArgumentError):
        uncompress_body(b"not zlib", 1)
