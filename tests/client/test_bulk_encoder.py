"""Our SendBulk encoder: units as the broker would store them, ids and receipts as before."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from broker_core.client.bulk import IdBlock, bulk_receipts, encode_bulk, make_receipts
from broker_core.client.model import SendReceipt
from broker_core.errors import InvalidArgumentError
from broker_core.protocol import unit as layout
from broker_core.protocol.bulk_send import decode_request, encode_response

OK = {"code": 20000, "message": "OK"}


def _check_units(frame: bytes, bodies: list[bytes]) -> list[bytes]:
    """Every unit's body, body CRC and unit CRC checked one zlib call each; the tails."""
    req = decode_request(frame)
    units, at, tails = bytes(req.units), 0, []
    for size, body in zip(req.sizes.tolist(), bodies, strict=True):
        unit = units[at : at + size]
        head = np.frombuffer(unit[: layout.HEADER_SIZE], layout.HEADER_DTYPE)[0]
        end = layout.HEADER_SIZE + len(body)
        assert unit[layout.HEADER_SIZE : end] == body
        assert int(head["body_crc"]) == zlib.crc32(body)
        span = unit[layout.CRC_START : layout.HEADER_SIZE]
        assert int(head["unit_crc"]) == zlib.crc32(span, zlib.crc32(unit[end:]))
        tails.append(unit[end:])
        at += size
    return tails


@pytest.mark.parametrize(
    "bodies",
    [
        [bytes(range(128))] * 256,  # the produce bench's batch
        [bytes([i % 256]) * 128 for i in range(256)],  # distinct bodies of one length
        [b"x" * (i % 7) for i in range(100)],  # lengths differ (an empty body too)
        [b"one"],
    ],
)
def test_units_and_crcs_of_bodies_alone(bodies: list[bytes]) -> None:
    frame, ids = encode_bulk("t-bulk", bodies)
    tails = _check_units(frame, bodies)
    assert [t[9:] for t in tails] == [f"UNIQ_KEY\x01{i}\x02".encode() for i in ids.strings()]


def test_units_and_crcs_with_tags_and_keys() -> None:
    bodies = [b"b%d" % i for i in range(40)]
    tags = [None if i % 3 else f"tag{i}" for i in range(40)]
    keys = [[f"k{i}"] if i % 2 else None for i in range(40)]
    frame, _ids = encode_bulk("t", bodies, tags=tags, keys=keys)
    tails = _check_units(frame, bodies)
    assert all(tail.startswith(b"\x01t") for tail in tails)
    assert b"TAGS\x01tag3\x02" in tails[3] and b"KEYS\x01k1\x02" in tails[1]


def test_id_strings_across_the_32_bit_wrap() -> None:
    block = IdBlock("01ABCDEF", 0xFFFF_FFFE, 4)
    want = [f"01ABCDEF{(0xFFFF_FFFE + i) & 0xFFFFFFFF:08X}" for i in range(4)]
    assert block.strings() == want
    assert IdBlock("P", 5, 0).strings() == []


def test_receipts_equal_those_made_one_by_one() -> None:
    _frame, ids = encode_bulk("t", [b"a"] * 300)
    offsets = list(range(1000, 1300))
    got = bulk_receipts(encode_response(OK, offsets), ids)
    want = [SendReceipt(i, o, "", "") for i, o in zip(ids.strings(), offsets, strict=True)]
    assert got == want
    assert {hash(r) for r in got} == {hash(r) for r in want}
    assert bulk_receipts(encode_response(OK, offsets), ids, receipts=False) == []


def test_receipts_refuse_a_count_mismatch() -> None:
    with pytest.raises(InvalidArgumentError, match="2 offsets for 3 message ids"):
        make_receipts(["a", "b", "c"], [1, 2])
    _frame, ids = encode_bulk("t", [b"a"] * 3)
    with pytest.raises(InvalidArgumentError, match="2 offsets for 3 messages"):
        bulk_receipts(encode_response(OK, [1, 2]), ids)


def test_all_bytes_decides_the_bodies_alone_path() -> None:
    from broker_core.client.producing import _all_bytes

    assert _all_bytes([b"a", b"b"])
    assert not _all_bytes([])
    assert not _all_bytes([b"a", bytearray(b"b")])  # a subclass or other buffer is a message
    assert not _all_bytes(["a", "b"])
    assert not _all_bytes([b"a", {"body": b"b", "message_group": "g"}])


def test_id_strings_from_the_encoders_rows_equal_those_made_alone() -> None:
    _frame, ids = encode_bulk("t", [b"a"] * 70)
    assert ids.id_rows is not None
    alone = IdBlock(ids.prefix, ids.first, ids.count)
    assert ids.strings() == alone.strings() and ids == alone
    assert len(set(ids.strings())) == 70
