"""The unit layout's struct and dtype come from one field table and agree byte for byte."""

from __future__ import annotations

import numpy as np

from broker_core.protocol import unit


def test_struct_and_dtype_agree_on_every_field() -> None:
    values = (
        120,
        unit.MESSAGE_MAGIC,
        7,
        8,
        3,
        0,
        41,
        4096,
        0,
        1_000,
        b"\x0a\x00\x00\x09",
        5555,
        2_000,
        b"\x7f\x00\x00\x01",
        8081,
        2,
        0,
        -5,
        17,
    )
    packed = unit.HEADER.pack(*values)
    record = np.frombuffer(packed, unit.HEADER_DTYPE)[0]
    for (name, _, _), value in zip(unit.FIELDS, values, strict=True):
        got = record[name]
        assert (bytes(got) if isinstance(value, bytes) else int(got)) == value, name


def test_positions_follow_the_table() -> None:
    assert unit.HEADER_SIZE == 100
    assert (unit.UNIT_CRC_POS, unit.CRC_START, unit.STORE_TIME_POS) == (8, 12, 60)
    assert unit.MIN_UNIT_BYTES == 103
