"""The one packer and the batch's queue grouping: a run of any length, either way.

``pack_units`` and ``ColumnBatch.queue_rows`` work record by record on runs shorter than
``SMALL_BATCH`` and with numpy field assignments on longer ones (and ``encode_messages``
notes the groups as it goes). All must give the same bytes, offsets and groups for the
same batch: every batch here is packed both ways (the threshold moved to each extreme)
and compared, and the units are read back by the codec.
"""

from __future__ import annotations

import random

import pytest

from broker_core.message import Message
from broker_core.protocol import unit as layout
from broker_core.protocol import unit_crc
from broker_core.store import codec, columns, packer
from broker_core.store.columns import ColumnBatch, encode_messages

LIMITS = dict(max_body_bytes=4096, max_properties_bytes=1024)
HOST = (b"\x0a\x00\x00\x05", 10911)
NOW_MS = 1_700_000_000_123


def mixed_messages(count: int, seed: int) -> list[Message]:
    """Two topics, several queues, transaction units that never enter a queue."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        sys_flag = rng.choice(
            [0, 0, 0, layout.SYSFLAG_TRANSACTION_PREPARED, layout.SYSFLAG_TRANSACTION_ROLLBACK]
        )
        props = {"UNIQ_KEY": f"ID{i}"}
        if rng.random() < 0.5:
            props["TAGS"] = rng.choice(["a", "b"])
        out.append(
            Message(
                rng.choice(["alpha", "beta"]),
                rng.randbytes(rng.randint(1, 300)),
                queue_id=rng.randint(0, 3),
                flag=rng.randint(0, 9),
                sys_flag=sys_flag,
                properties=props,
                born_timestamp_ms=1_700_000_000_000 + i,
                born_host=("10.0.0.9", 4000 + i),
                reconsume_times=rng.randint(0, 3),
                prepared_transaction_offset=rng.randint(0, 1 << 40),
            )
        )
    return out


def pack_in_runs(batch: ColumnBatch, runs: list[int], first_offset: int) -> bytes:
    """Assign queue offsets, then pack the batch in consecutive runs of these lengths."""
    next_offsets: dict[tuple[str, int], int] = {}

    def take_many(topic: str, queue_id: int, n: int) -> int:
        first = next_offsets.get((topic, queue_id), 10)
        next_offsets[(topic, queue_id)] = first + n
        return first

    packer.assign_queue_offsets(batch, batch.queue_rows(), take_many)
    out, lo, phys = b"", 0, first_offset
    for length in runs:
        part = packer.pack_units(batch, lo, lo + length, phys, NOW_MS, HOST)
        out, lo, phys = out + part, lo + length, phys + len(part)
    return out


def with_threshold(monkeypatch: pytest.MonkeyPatch, small: int) -> None:
    monkeypatch.setattr(columns, "SMALL_BATCH", small)
    monkeypatch.setattr(packer, "SMALL_BATCH", small)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("count", [1, 2, 15, 16, 40])
def test_record_by_record_and_vectorised_agree(
    monkeypatch: pytest.MonkeyPatch, seed: int, count: int
) -> None:
    messages = mixed_messages(count, seed)
    runs = [count] if seed % 2 else [count // 2, count - count // 2]
    results = []
    for small in (0, 1 << 30):  # everything vectorised, then everything record by record
        with_threshold(monkeypatch, small)
        batch = encode_messages(messages, **LIMITS)
        known, batch.known_rows = batch.known_rows, None  # what encoding found, then computed
        groups = batch.queue_rows()
        assert groups == known
        results.append((pack_in_runs(batch, [r for r in runs if r], 4096), batch.head, groups))
        monkeypatch.undo()
    (data, head, groups), (data2, head2, groups2) = results
    assert data == data2 and (head == head2).all() and groups == groups2
    in_queue = [
        m.sys_flag & layout.SYSFLAG_TRANSACTION_MASK not in layout.NOT_IN_QUEUE for m in messages
    ]
    assert sorted(row for rows in groups.values() for row in rows) == [
        row for row, queued in enumerate(in_queue) if queued
    ]
    pos = 0
    for row, msg in enumerate(messages):
        size = codec.check_unit(data, pos, 4096 + pos)
        got = codec.decode(data, pos)
        assert (got.topic, got.body, got.queue_id, got.flag, got.sys_flag) == (
            msg.topic,
            msg.body,
            msg.queue_id,
            msg.flag,
            msg.sys_flag,
        )
        assert (got.store_timestamp_ms, got.store_host) == (NOW_MS, ("10.0.0.5", 10911))
        assert got.queue_offset == (int(head["queue_offset"][row]) if in_queue[row] else 0)
        assert got.physical_offset == int(head["physical_offset"][row]) == 4096 + pos
        pos += size
    assert pos == len(data)


def test_queue_offsets_are_consecutive_per_queue_in_batch_order() -> None:
    messages = [Message("t", b"x", queue_id=i % 2) for i in range(40)]
    batch = encode_messages(messages, **LIMITS)
    pack_in_runs(batch, [40], 0)
    assert batch.head["queue_offset"].tolist() == [10 + i // 2 for i in range(40)]


def as_patchable(batch: ColumnBatch) -> ColumnBatch:
    """The batch in a bulk frame's form: each unit CRC computed with the open fields
    zero (as the client does), no tail CRCs, so the packer patches instead."""
    assert batch.tail_crcs is not None
    for row, tail_crc in enumerate(batch.tail_crcs):
        header = batch.raw[row * layout.HEADER_SIZE : (row + 1) * layout.HEADER_SIZE]
        batch.head["unit_crc"][row] = unit_crc.open_zero_crc(header, tail_crc)
    batch.tail_crcs = None
    return batch


@pytest.mark.parametrize(
    ("first_queue_offset", "first_offset"),
    [(10, 4096), ((1 << 32) - 3, 4096), (10, (1 << 32) - 300), (1 << 40, (1 << 33) + 7)],
)
@pytest.mark.parametrize("small", [0, 1 << 30])
def test_patched_crcs_equal_crcs_computed_whole(
    monkeypatch: pytest.MonkeyPatch, first_queue_offset: int, first_offset: int, small: int
) -> None:
    """The packer's patch (a run: the table, only the offsets' low halves when the high
    ones are shared; short runs: one CRC of the delta) gives the bytes of CRCs computed
    whole, on either side of 2**32 for queue and physical offsets."""
    messages = mixed_messages(40, 7)
    with_threshold(monkeypatch, small)

    def take_many(topic: str, queue_id: int, n: int) -> int:
        return first_queue_offset + queue_id

    packed = []
    for batch in (
        encode_messages(messages, **LIMITS),
        as_patchable(encode_messages(messages, **LIMITS)),
    ):
        packer.assign_queue_offsets(batch, batch.queue_rows(), take_many)
        packed.append(bytes(packer.pack_units(batch, 0, 40, first_offset, NOW_MS, HOST)))
    assert packed[0] == packed[1]
    pos = 0
    while pos < len(packed[0]):  # every unit's CRCs check out
        pos += codec.check_unit(packed[0], pos, first_offset + pos)
