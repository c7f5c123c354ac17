"""Receipt handles: round trips, and every kind of garbage rejected as invalid."""

from __future__ import annotations

import base64
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.broker.pop.receipt import (
    CRC,
    FORMAT,
    HEADER,
    LENGTH,
    ReceiptHandle,
    decode_handle,
)
from broker_core.errors import InvalidReceiptHandleError

BASE = ReceiptHandle("orders", 3, 1_234, 99, 1_700_000_000_000, 30_000, "broker-a")
I64 = 2**63 - 1


def _raw(handle: ReceiptHandle) -> bytes:
    text = handle.encode()
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _text(raw: bytes, *, reseal: bool = False) -> str:
    """Base64url of ``raw``; ``reseal`` recomputes the CRC so other checks are reached."""
    if reseal:
        raw = raw[: -CRC.size] + CRC.pack(zlib.crc32(raw[: -CRC.size]))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "handle",
    [
        BASE,
        ReceiptHandle("%RETRY%group-1", 0, 0, 0, 0, 0, ""),
        ReceiptHandle("t" * 127, 2**31 - 1, I64, I64, I64, I64, "b" * 255),
        ReceiptHandle("订单", 1, 2, 3, 4, 5, "broker-ü"),
    ],
)
def test_round_trip(handle: ReceiptHandle) -> None:
    text = handle.encode()
    assert decode_handle(text) == handle
    assert text.isascii() and "=" not in text and "+" not in text and "/" not in text


def test_deadline_and_layout() -> None:
    assert BASE.deadline_ms == 1_700_000_030_000
    raw = _raw(BASE)
    assert HEADER.unpack_from(raw) == (FORMAT, 3, 1_234, 99, 1_700_000_000_000, 30_000)
    assert raw[HEADER.size : HEADER.size + 1 + 6] == LENGTH.pack(6) + b"orders"
    assert len(raw) == HEADER.size + 1 + 6 + 1 + 8 + CRC.size


@pytest.mark.parametrize(
    "field, value",
    [
        ("topic", "payments"),
        ("queue_id", 4),
        ("queue_offset", 1_235),
        ("checkpoint_offset", 100),
        ("pop_time_ms", 1),
        ("invisible_ms", 1),
        ("broker_name", "broker-b"),
    ],
)
def test_every_field_changes_the_handle(field: str, value: object) -> None:
    fields = {f: getattr(BASE, f) for f in BASE.__dataclass_fields__}
    other = ReceiptHandle(**{**fields, field: value})  # type: ignore[arg-type]
    assert other.encode() != BASE.encode()
    assert decode_handle(other.encode()) == other


@pytest.mark.parametrize(
    "text",
    ["", "!", "not a handle", "AAAA", "====", "é" * 8, "A" * 2000, BASE.encode() + "*"],
)
def test_garbage_strings_are_invalid(text: str) -> None:
    with pytest.raises(InvalidReceiptHandleError):
        decode_handle(text)


@pytest.mark.parametrize("value", [None, 42, b"bytes"])
def test_non_strings_are_invalid(value: object) -> None:
    with pytest.raises(InvalidReceiptHandleError):
        decode_handle(value)  # type: ignore[arg-type]


def test_every_truncation_is_invalid() -> None:
    raw = _raw(BASE)
    for size in range(len(raw)):
        with pytest.raises(InvalidReceiptHandleError):
            decode_handle(_text(raw[:size]))


def test_every_flipped_byte_is_invalid() -> None:
    raw = _raw(BASE)
    rng = random.Random(7)
    for pos in range(len(raw)):
        broken = bytearray(raw)
        broken[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(InvalidReceiptHandleError):
            decode_handle(_text(bytes(broken)))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda raw: b"\x02" + raw[1:], "format 2"),
        (lambda raw: raw[:-4] + b"x" + raw[-4:], "trailing"),
        (lambda raw: raw[:1] + (-1).to_bytes(4, "big", signed=True) + raw[5:], "negative"),
        (lambda raw: raw[: HEADER.size] + b"\x00" + raw[HEADER.size + 7 :], "empty topic"),
        (lambda raw: raw[: HEADER.size] + b"\x50" + raw[HEADER.size + 1 :], "ends inside"),
        (lambda raw: raw[: HEADER.size + 1] + b"\xff" + raw[HEADER.size + 2 :], "not UTF-8"),
    ],
)
def test_well_sealed_but_malformed_is_invalid(mutate, message: str) -> None:
    with pytest.raises(InvalidReceiptHandleError, match=message):
        decode_handle(_text(mutate(_raw(BASE)), reseal=True))


def test_names_too_long_to_encode() -> None:
    with pytest.raises(InvalidReceiptHandleError):
        ReceiptHandle("t" * 256, 0, 0, 0, 0, 0, "b").encode()
    with pytest.raises(InvalidReceiptHandleError):
        ReceiptHandle("", 0, 0, 0, 0, 0, "b").encode()


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
non_negative = st.integers(0, I64)


@settings(max_examples=300, deadline=None)
@given(
    names,
    st.integers(0, 2**31 - 1),
    non_negative,
    non_negative,
    non_negative,
    non_negative,
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
)
def test_round_trip_property(topic, qid, offset, version, pop_ms, inv_ms, broker) -> None:
    handle = ReceiptHandle(topic, qid, offset, version, pop_ms, inv_ms, broker)
    assert decode_handle(handle.encode()) == handle
