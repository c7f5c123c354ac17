"""The unit CRC patch equals ``zlib.crc32`` of the patched unit, for any tail and header.

CRC-32 is affine: filling header fields after the CRC was computed changes it by ``L`` of
the delta, which ``unit_crc`` computes from a table (a run) or one CRC of the delta (one
unit). Hypothesis draws tails, headers, which fields change and to what.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.protocol import unit as layout
from broker_core.protocol import unit_crc

SPAN = unit_crc.SPAN_START


def true_crc(header: bytes | bytearray, tail: bytes) -> int:
    return zlib.crc32(bytes(header[SPAN:]), zlib.crc32(tail))


units = st.lists(
    st.tuples(st.binary(min_size=0, max_size=300), st.binary(min_size=100, max_size=100)),
    min_size=1,
    max_size=20,
)
field_names = st.lists(
    st.sampled_from([name for name, _, _ in layout.FIELDS[3:]]), min_size=1, unique=True
)


@settings(max_examples=200, deadline=None)
@given(units, field_names, st.randoms(use_true_random=False))
def test_table_patch_equals_zlib(
    drawn: list[tuple[bytes, bytes]], names: list[str], rng: random.Random
) -> None:
    positions = unit_crc.field_positions(tuple(names))
    before = np.frombuffer(b"".join(h for _, h in drawn), np.uint8).reshape(-1, 100).copy()
    before[:, positions] = 0  # the fields to fill are zero when the CRC is computed
    crcs = np.array(
        [true_crc(h.tobytes(), t) for h, (t, _) in zip(before, drawn, strict=True)], np.uint32
    )
    after = before.copy()
    after[:, positions] = np.array(
        [[rng.randrange(256) for _ in positions] for _ in drawn], np.uint8
    )
    want = [true_crc(h.tobytes(), t) for h, (t, _) in zip(after, drawn, strict=True)]
    assert unit_crc.patch(crcs, after, positions).tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(min_size=100, max_size=100), st.binary(min_size=88))
def test_one_unit_patch_and_open_zero_crc_equal_zlib(
    tail: bytes, header: bytes, new: bytes
) -> None:
    before = bytearray(header)
    for pos in unit_crc.OPEN_POSITIONS.tolist():  # the open fields are zero at first
        before[pos] = 0
    base = true_crc(before, tail)
    assert unit_crc.open_zero_crc(header, zlib.crc32(tail)) == base
    after = bytearray(before)
    for pos in unit_crc.OPEN_POSITIONS.tolist():
        after[pos] = new[pos - SPAN]
    assert unit_crc.patch_one(base, unit_crc.open_part(after[SPAN:])) == true_crc(after, tail)


def test_open_fields_are_the_ones_the_append_fills() -> None:
    assert set(unit_crc.OPEN_FIELDS) == {
        "queue_id",
        "queue_offset",
        "physical_offset",
        "store_timestamp_ms",
        "store_host_ip",
        "store_host_port",
    }
    assert unit_crc.TABLE.shape == (88, 256) and not unit_crc.TABLE[:, 0].any()
