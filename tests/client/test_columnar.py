"""Bulk decoding of commitlog units (``broker_core.client.columnar``), no network.

Every column is compared with the codec's one-message decoder over varied messages, and
damaged units must raise CorruptionError — never decode to something else.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from broker_core.client.columnar import (
    HEADER_DTYPE,
    check_placement,
    decode_units,
    split_properties,
)
from broker_core.errors import CorruptionError
from broker_core.message import Message
from broker_core.protocol import unit as layout
from broker_core.protocol.properties import SYSTEM_KEYS
from broker_core.server.convert_out import user_properties
from broker_core.store import codec
from tests.store.conftest import seal


def _units(messages: list[Message], first_offset: int = 0) -> tuple[bytes, np.ndarray]:
    parts, phys = [], 1_000
    for i, msg in enumerate(messages):
        parts.append(seal(msg, first_offset + i, phys, 5_000 + i, (b"\x0a\x00\x00\x02", 8081)))
        phys += len(parts[-1])
    return b"".join(parts), np.array([len(p) for p in parts], np.int32)


def _varied(count: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        props = {"n": str(i), "ünï": "cödé ✓"} if rng.random() < 0.7 else {}
        if rng.random() < 0.8:
            props["UNIQ_KEY"] = f"ID{i:06d}"
        if rng.random() < 0.5:
            props["TAGS"] = rng.choice(["a", "paid", "t" * 40])
        if rng.random() < 0.4:
            props["KEYS"] = " ".join(f"k{i}-{j}" for j in range(rng.randint(1, 3)))
        if rng.random() < 0.2:
            props["__SHARDINGKEY"] = f"group-{i % 3}"
        body = rng.randbytes(rng.choice([0, 1, 12, 13, 128, 3000]))
        out.append(
            Message(
                "topic-" + "x" * rng.randint(0, 5),
                body,
                properties=props,
                born_timestamp_ms=1_700_000_000_000 + i,
            )
        )
    return out


def test_header_dtype_is_the_codec_header() -> None:
    assert HEADER_DTYPE.itemsize == layout.HEADER.size
    unit = seal(Message("t", b"body", properties={"TAGS": "a"}), 7, 0, 99)
    record = np.frombuffer(unit[: layout.HEADER_SIZE], HEADER_DTYPE)[0]
    fields = layout.HEADER.unpack_from(unit)
    assert [
        record["total_size"],
        record["queue_offset"],
        record["store_timestamp_ms"],
        record["tags_code"],
        record["body_length"],
    ] == [fields[0], fields[6], fields[12], fields[17], fields[18]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columns_equal_the_one_message_decoder(seed: int) -> None:
    messages = _varied(300, seed)
    data, sizes = _units(messages, first_offset=40)
    cols = decode_units(data, sizes)
    props = split_properties(cols, SYSTEM_KEYS)
    expected, pos = [], 0
    for size in sizes.tolist():
        expected.append(codec.decode(data, pos))
        pos += size
    assert cols.queue_offset.tolist() == list(range(40, 340))
    assert cols.topic.to_pylist() == [m.topic for m in expected]
    assert cols.body.to_pylist() == [m.body for m in expected]
    assert cols.born_timestamp_ms.tolist() == [m.born_timestamp_ms for m in expected]
    assert cols.store_timestamp_ms.tolist() == [m.store_timestamp_ms for m in expected]
    assert props.tag.to_pylist() == [m.tag for m in expected]
    assert props.message_id.to_pylist() == [m.message_id for m in expected]
    assert props.keys.to_pylist() == [list(m.keys) for m in expected]
    assert props.message_group.to_pylist() == [m.properties.get("__SHARDINGKEY") for m in expected]
    assert [dict(row) for row in props.user.to_pylist()] == [user_properties(m) for m in expected]


def test_an_empty_batch_decodes_to_empty_columns() -> None:
    cols = decode_units(b"", np.zeros(0, np.int32))
    assert cols.count == 0 and split_properties(cols).user.to_pylist() == []


def test_every_flipped_byte_is_caught() -> None:
    data, sizes = _units(_varied(3, 7))
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x40
        with pytest.raises(CorruptionError):
            decode_units(bytes(damaged), sizes)


@pytest.mark.parametrize("change", ["short", "long", "split"])
def test_sizes_that_do_not_match_the_units_are_corruption(change: str) -> None:
    data, sizes = _units(_varied(4, 9))
    if change == "short":
        data = data[:-1]
    elif change == "long":
        data += b"\x00"
    else:
        sizes = np.array([sizes[0] + sizes[1], *sizes[2:]], np.int32)
    with pytest.raises(CorruptionError):
        decode_units(data, sizes)


def test_placement_catches_foreign_and_disordered_units() -> None:
    messages = [Message("orders", b"x", queue_id=2) for _ in range(3)]
    data, sizes = _units(messages, first_offset=10)
    cols = decode_units(data, sizes)
    check_placement(cols, "orders", 2, 10)
    with pytest.raises(CorruptionError, match="another queue"):
        check_placement(cols, "orders", 1, 10)
    with pytest.raises(CorruptionError, match="another topic"):
        check_placement(cols, "payments", 2, 10)
    with pytest.raises(CorruptionError, match="out of order"):
        check_placement(cols, "orders", 2, 11)


def _general_split(cols: object, monkeypatch: pytest.MonkeyPatch) -> object:
    from broker_core.client import columnar

    with monkeypatch.context() as patch:
        patch.setattr(columnar, "_ids_only", lambda properties: None)
        return split_properties(cols)  # type: ignore[arg-type]


@pytest.mark.parametrize("extra", [None, {"TAGS": "a"}, {"n": "1"}, {"KEYS": "k1 k2"}])
def test_id_only_properties_take_the_fast_path_with_the_same_columns(
    extra: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [Message("t", b"x", properties={"UNIQ_KEY": f"ID{i:05d}"}) for i in range(50)]
    messages.append(Message("t", b"", properties={"UNIQ_KEY": ""}))
    if extra is not None:  # one message with more than its id: the general path decides
        messages[7] = Message("t", b"y", properties={"UNIQ_KEY": "ID-seven", **extra})
    data, sizes = _units(messages)
    cols = decode_units(data, sizes)
    fast, general = split_properties(cols), _general_split(cols, monkeypatch)
    for name in ("tag", "message_id", "keys", "message_group", "user"):
        got, want = getattr(fast, name), getattr(general, name)
        assert got.type == want.type and got.to_pylist() == want.to_pylist(), name
    assert fast.message_id[0].as_py() == "ID00000"
