"""Fuzz the commitlog unit codec: round trips, damaged units, forged units, bad input.

The read path is ``check_unit`` then ``decode`` (what ``CommitLog.read_message`` does).
Whatever bytes it is given, it returns exactly the message that was written or raises
CorruptionError: never another exception, never a different message. ``encode`` refuses
every invalid message with its specific InvalidArgumentError subclass. The client's bulk
decoder (``broker_core.client.columnar``) reads the same units and is held to the same
rules, and to agreeing with the codec.

Each property runs twice: a short derandomized run in the normal suite, and a wide random
run under ``-m slow`` (``./dev chaos``).
"""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.client import columnar
from broker_core.errors import (
    CorruptionError,
    InvalidArgumentError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from broker_core.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, Message, tag_hash
from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.columns import encode_messages
from tests.chaos.load import budgets
from tests.store.conftest import seal

MAX_BODY_BYTES = 8 << 10
MAX_PROPERTIES_BYTES = 2 << 10
LIMITS = {"max_body_bytes": MAX_BODY_BYTES, "max_properties_bytes": MAX_PROPERTIES_BYTES}
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U63 = st.integers(0, 2**63 - 1)


# ---- generated messages -------------------------------------------------------------------

# Text the codec must carry: any code point but surrogates and its two separators.
TEXT = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x01\x02"), max_size=24
)
NAMES = TEXT.filter(bool)
TOPICS = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=60).filter(
    lambda t: len(t.encode()) <= 127
)
BODIES = st.one_of(
    st.binary(max_size=300),
    st.integers(0, MAX_BODY_BYTES).map(bytes),
    st.binary(min_size=1000, max_size=MAX_BODY_BYTES),
)
HOSTS = st.one_of(st.ip_addresses(v=4).map(str), st.sampled_from(["::1", "", "not-a-host"]))


@st.composite
def properties(draw: st.DrawFn) -> dict[str, str]:
    props = draw(st.dictionaries(NAMES, TEXT, max_size=6))
    if draw(st.booleans()):
        props[PROPERTY_TAGS] = draw(NAMES)
    if draw(st.booleans()):
        props[PROPERTY_KEYS] = " ".join(draw(st.lists(NAMES, max_size=3)))
    if draw(st.booleans()):
        props[PROPERTY_UNIQ_KEY] = draw(NAMES)
    return props


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message(
        topic=draw(TOPICS),
        body=draw(BODIES),
        queue_id=draw(I32),
        properties=draw(properties()),
        flag=draw(I32),
        sys_flag=draw(I32),
        born_timestamp_ms=draw(I64),
        born_host=(draw(HOSTS), draw(I32)),
        reconsume_times=draw(I32),
        prepared_transaction_offset=draw(I64),
    )


@dataclass(frozen=True)
class Placed:
    """A message sealed into a unit at a commitlog position."""

    message: Message
    queue_offset: int
    physical_offset: int
    store_timestamp_ms: int
    store_ip: str
    store_port: int

    def seal(self) -> bytes:
        store_host = (socket.inet_aton(self.store_ip), self.store_port)
        return seal(
            self.message,
            self.queue_offset,
            self.physical_offset,
            self.store_timestamp_ms,
            store_host,
            **LIMITS,
        )


@st.composite
def placed(draw: st.DrawFn) -> Placed:
    return Placed(
        draw(messages()),
        draw(U63),
        draw(U63),
        draw(I64),
        draw(st.ip_addresses(v=4).map(str)),
        draw(I32),
    )


def expected_ip(host: str) -> str:
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return "0.0.0.0"


def assert_decodes_to(unit: bytes, pos: int, p: Placed) -> None:
    """``unit[pos:]`` verifies and decodes to exactly what ``p`` wrote."""
    m, total = p.message, len(p.seal())
    assert codec.check_unit(unit, pos, p.physical_offset) == total
    got = codec.decode(unit, pos)
    assert (got.topic, got.body, got.properties) == (m.topic, m.body, m.properties)
    assert (got.queue_id, got.flag, got.sys_flag, got.reconsume_times) == (
        m.queue_id,
        m.flag,
        m.sys_flag,
        m.reconsume_times,
    )
    assert (got.born_timestamp_ms, got.prepared_transaction_offset) == (
        m.born_timestamp_ms,
        m.prepared_transaction_offset,
    )
    assert got.born_host == (expected_ip(m.born_host[0]), m.born_host[1])
    assert (got.queue_offset, got.physical_offset, got.store_timestamp_ms) == (
        p.queue_offset,
        p.physical_offset,
        p.store_timestamp_ms,
    )
    assert got.store_host == (p.store_ip, p.store_port)
    assert (got.body_crc, got.stored_size) == (zlib.crc32(m.body), total)


@pytest.mark.parametrize("budget", budgets(80, 5_000))
def test_round_trip_keeps_every_field(budget: settings) -> None:
    @budget
    @given(placed(), st.binary(max_size=40))
    def check(p: Placed, before: bytes) -> None:
        unit = p.seal()
        assert_decodes_to(before + unit + b"\x00" * 8, len(before), p)
        req = codec.dispatch_request(before + unit, len(before))
        keys = [k for k in p.message.properties.get(PROPERTY_KEYS, "").split(" ") if k]
        uniq = p.message.properties.get(PROPERTY_UNIQ_KEY)
        assert req.keys == ([uniq] if uniq else []) + keys
        assert req.tags_code == tag_hash(p.message.properties.get(PROPERTY_TAGS))
        assert (req.topic, req.queue_offset, req.size) == (
            p.message.topic,
            p.queue_offset,
            len(unit),
        )

    check()


# ---- damaged units ------------------------------------------------------------------------


@st.composite
def mutation(draw: st.DrawFn, unit: bytes) -> bytes:
    """``unit`` after 1..4 edits of the kinds a disk or a torn write produces."""
    data = bytearray(unit)
    for _ in range(draw(st.integers(1, 4))):
        if not data:  # cut to nothing: only an insert can still change it
            data += draw(st.binary(max_size=8))
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "set", "zero", "garbage", "cut", "insert", "drop"]))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.integers(0, 255))
        elif kind == "zero":
            n = draw(st.integers(1, 4096))
            data[at : at + n] = bytes(len(data[at : at + n]))
        elif kind == "garbage":
            data[at:] = draw(st.binary(min_size=len(data) - at, max_size=len(data) - at))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


def decodes_or_corrupt(buf: bytes, pos: int, phys: int) -> Any:
    """Run the read path; the decoded message, or None after a CorruptionError."""
    try:
        codec.check_unit(buf, pos, phys)
        return codec.decode(buf, pos)
    except CorruptionError:
        return None


@pytest.mark.parametrize("budget", budgets(200, 20_000))
def test_damaged_unit_never_decodes_to_a_wrong_message(budget: settings) -> None:
    @budget
    @given(placed(), st.data())
    def check(p: Placed, data: st.DataObject) -> None:
        unit = p.seal()
        damaged = data.draw(mutation(unit))
        got = decodes_or_corrupt(damaged, 0, p.physical_offset)
        if damaged[: len(unit)] == unit:  # the edits missed the unit (or undid themselves)
            assert_decodes_to(damaged, 0, p)
        else:
            assert got is None, "a damaged unit decoded"

    check()


@pytest.mark.parametrize("budget", budgets(300, 20_000))
def test_random_bytes_are_corruption(budget: settings) -> None:
    head = st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.sampled_from([layout.MESSAGE_MAGIC, layout.BLANK_MAGIC, 0, 0xFFFFFFFF]),
    )

    @budget
    @given(st.binary(max_size=600), st.one_of(st.none(), head), st.integers(0, 16), U63)
    def check(raw: bytes, forced: tuple[int, int] | None, pos: int, phys: int) -> None:
        buf = bytearray(raw)
        if forced is not None and len(buf) >= pos + 8:  # get past the first checks
            size = forced[0] if forced[0] % 2 else len(buf) - pos
            layout.SIZE_MAGIC.pack_into(buf, pos, size, forced[1])
        assert decodes_or_corrupt(bytes(buf), min(pos, len(buf)), phys) is None

    check()


# ---- forged units: every checksum right, the structure wrong -------------------------------


@st.composite
def forged_unit(draw: st.DrawFn) -> tuple[bytes, int]:
    """A unit whose CRCs match but whose lengths and text need not make sense.

    Only a writer bug (or someone who computes CRCs) produces these; the reader must still
    answer with CorruptionError rather than crash or read past the unit.
    """
    body = draw(st.binary(max_size=64))
    tail = draw(
        st.one_of(
            st.binary(max_size=64),
            st.tuples(
                st.integers(0, 255),
                st.binary(max_size=40),
                st.integers(0, 0xFFFF),
                st.binary(max_size=40),
            ).map(lambda t: bytes([t[0]]) + t[1] + t[2].to_bytes(2, "big") + t[3]),
        )
    )
    body_len = draw(st.one_of(st.just(len(body)), st.integers(-5, 200)))
    total = draw(
        st.one_of(
            st.just(layout.HEADER_SIZE + len(body) + len(tail)),
            st.integers(layout.HEADER_SIZE, 400),
        )
    )
    phys = draw(U63)
    header = bytearray(
        layout.HEADER.pack(
            total,
            layout.MESSAGE_MAGIC,
            0,
            zlib.crc32(body),
            draw(I32),
            draw(I32),
            draw(U63),
            phys,
            draw(I32),
            draw(I64),
            draw(st.binary(min_size=4, max_size=4)),
            draw(I32),
            draw(I64),
            draw(st.binary(min_size=4, max_size=4)),
            draw(I32),
            draw(I32),
            draw(I64),
            draw(I64),
            body_len,
        )
    )
    unit = bytearray(header + body + tail + draw(st.binary(max_size=16)))
    if body_len >= 0 and layout.HEADER_SIZE + body_len <= total <= len(unit):
        crc = zlib.crc32(unit[layout.HEADER_SIZE + body_len : total])
        struct.pack_into(
            ">I",
            unit,
            layout.UNIT_CRC_POS,
            zlib.crc32(unit[layout.CRC_START : layout.HEADER_SIZE], crc),
        )
    return bytes(unit), phys


@pytest.mark.parametrize("budget", budgets(200, 20_000))
def test_forged_units_decode_or_raise_corruption(budget: settings) -> None:
    @budget
    @given(forged_unit())
    def check(forged: tuple[bytes, int]) -> None:
        unit, phys = forged
        got = decodes_or_corrupt(unit, 0, phys)
        if got is not None:  # the structure happened to be sound: it re-encodes the same
            try:
                assert codec.dispatch_request(unit, 0).topic == got.topic
            except CorruptionError:
                pytest.fail("dispatch refused a unit that decoded")
            total = got.stored_size
            tail = unit[layout.HEADER_SIZE + len(got.body) : total]
            assert (
                tail
                == layout.TOPIC_LEN.pack(len(got.topic.encode()))
                + got.topic.encode()
                + (layout.PROPS_LEN.pack(len(tail) - 3 - len(got.topic.encode())))
                + tail[3 + len(got.topic.encode()) :]
            )
            assert codec.decode_properties(codec.encode_properties(got.properties)) == (
                got.properties
            )

    check()


# ---- invalid input is refused at encode ---------------------------------------------------

DEFECTS: dict[str, tuple[dict[str, Any], type[InvalidArgumentError]]] = {
    "empty topic": ({"topic": ""}, InvalidTopicError),
    "topic over 127 bytes": ({"topic": "ü" * 64}, InvalidTopicError),
    "surrogate in topic": ({"topic": "t\ud800"}, InvalidTopicError),
    "body over the limit": ({"body": bytes(MAX_BODY_BYTES + 1)}, MessageTooLargeError),
    "properties over the limit": (
        {"properties": {"k": "v" * MAX_PROPERTIES_BYTES}},
        PropertiesTooLargeError,
    ),
    "\\x01 in a name": ({"properties": {"a\x01b": "v"}}, InvalidPropertyError),
    "\\x02 in a name": ({"properties": {"a\x02b": "v"}}, InvalidPropertyError),
    "\\x01 in a value": ({"properties": {"k": "v\x01"}}, InvalidPropertyError),
    "\\x02 in a value": ({"properties": {"k": "\x02"}}, InvalidPropertyError),
    "empty name": ({"properties": {"": "v"}}, InvalidPropertyError),
    "surrogate in a value": ({"properties": {"k": "\udcff"}}, InvalidPropertyError),
    "surrogate in a name": ({"properties": {"\ud83d": "v"}}, InvalidPropertyError),
    "non-str value": ({"properties": {"k": 7}}, InvalidPropertyError),
    "non-str name": ({"properties": {7: "v"}}, InvalidPropertyError),
    "queue id over int32": ({"queue_id": 2**31}, InvalidArgumentError),
    "flag under int32": ({"flag": -(2**31) - 1}, InvalidArgumentError),
    "sys flag over int32": ({"sys_flag": 2**32}, InvalidArgumentError),
    "born time over int64": ({"born_timestamp_ms": 2**63}, InvalidArgumentError),
    "born port over int32": ({"born_host": ("127.0.0.1", 2**31)}, InvalidArgumentError),
    "reconsume times over int32": ({"reconsume_times": 2**40}, InvalidArgumentError),
    "prepared offset under int64": (
        {"prepared_transaction_offset": -(2**63) - 1},
        InvalidArgumentError,
    ),
}


@pytest.mark.parametrize("budget", budgets(100, 3_000))
def test_invalid_messages_are_refused_with_their_error(budget: settings) -> None:
    @budget
    @given(messages(), st.sampled_from(sorted(DEFECTS)))
    def check(msg: Message, defect: str) -> None:
        change, error = DEFECTS[defect]
        if "properties" in change:
            change = {"properties": {**msg.properties, **change["properties"]}}
        bad = replace(msg, **change)
        with pytest.raises(error) as caught:
            encode_messages([bad], **LIMITS)
        assert str(caught.value)

    check()


def test_short_buffers_are_corruption_not_struct_errors() -> None:
    unit = Placed(Message("t", b"x"), 0, 64, 0, "127.0.0.1", 1).seal()
    for size in range(len(unit)):
        with pytest.raises(CorruptionError):
            codec.check_unit(unit[:size], 0, 64)


# ---- the client's bulk decoder reads the same units -----------------------------------------


def columnar_or_corrupt(data: bytes, sizes: list[int]) -> Any:
    """``decode_units`` of the batch, or None after a CorruptionError (nothing else)."""
    try:
        return columnar.decode_units(data, np.array(sizes, np.int32))
    except CorruptionError:
        return None


def assert_columns_match(cols: Any, placed_units: list[Placed]) -> None:
    assert cols.count == len(placed_units)
    for i, p in enumerate(placed_units):
        m = p.message
        assert cols.topic[i].as_py() == m.topic and cols.body[i].as_py() == m.body
        assert codec.decode_properties(cols.properties[i].as_py().encode()) == m.properties
        assert (int(cols.queue_id[i]), int(cols.queue_offset[i])) == (m.queue_id, p.queue_offset)
        assert int(cols.physical_offset[i]) == p.physical_offset
        assert int(cols.born_timestamp_ms[i]) == m.born_timestamp_ms
        assert int(cols.store_timestamp_ms[i]) == p.store_timestamp_ms


@pytest.mark.parametrize("budget", budgets(40, 5_000))
def test_bulk_decoder_reads_batches_back(budget: settings) -> None:
    @budget
    @given(st.lists(placed(), min_size=1, max_size=5))
    def check(batch: list[Placed]) -> None:
        units = [p.seal() for p in batch]
        cols = columnar.decode_units(b"".join(units), np.array([len(u) for u in units]))
        assert_columns_match(cols, batch)

    check()


@pytest.mark.parametrize("budget", budgets(80, 10_000))
def test_bulk_decoder_refuses_damaged_batches(budget: settings) -> None:
    @budget
    @given(st.lists(placed(), min_size=1, max_size=4), st.data())
    def check(batch: list[Placed], data: st.DataObject) -> None:
        units = [p.seal() for p in batch]
        whole = b"".join(units)
        sizes = [len(u) for u in units]
        damaged = data.draw(mutation(whole))
        if data.draw(st.booleans()):  # the consume queue's sizes can be wrong too
            i = data.draw(st.integers(0, len(sizes) - 1))
            sizes[i] = data.draw(st.integers(-5, len(damaged) + 5))
        cols = columnar_or_corrupt(damaged, sizes)
        if damaged == whole and sizes == [len(u) for u in units]:
            assert_columns_match(cols, batch)
        else:
            assert cols is None, "a damaged batch decoded"

    check()


@pytest.mark.parametrize("budget", budgets(200, 20_000))
def test_bulk_decoder_and_codec_agree_on_forged_units(budget: settings) -> None:
    @budget
    @given(forged_unit())
    def check(forged: tuple[bytes, int]) -> None:
        unit, phys = forged
        total = layout.SIZE_MAGIC.unpack_from(unit)[0]
        size = total if layout.HEADER_SIZE + 3 <= total <= len(unit) else len(unit)
        cols = columnar_or_corrupt(unit[:size], [size])
        one = decodes_or_corrupt(unit[:size], 0, phys)
        if cols is not None and one is not None:
            assert cols.topic[0].as_py() == one.topic and cols.body[0].as_py() == one.body
            assert codec.decode_properties(cols.properties[0].as_py().encode()) == (one.properties)
        elif one is not None:  # the codec read it: the bulk reader must not refuse it
            pytest.fail("the bulk decoder refused a unit the codec reads")
        elif cols is not None:  # only an empty topic may pass the bulk decoder alone
            assert cols.topic[0].as_py() == "", "the bulk decoder read a unit the codec refuses"

    check()
