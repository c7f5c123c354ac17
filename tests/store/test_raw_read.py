"""Raw reads (``MessageStore.get_raw``): the stored units of a queue range, undecoded."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from broker_core.errors import OffsetOutOfRangeError
from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message

Open = Callable[..., MessageStore]


def _decoded(data: bytes, sizes: np.ndarray) -> list:
    out, pos = [], 0
    for size in sizes.tolist():
        codec.check_unit(data, pos, layout.HEADER.unpack_from(data, pos)[7])
        out.append(codec.decode(data, pos))
        pos += size
    assert pos == len(data)
    return out


@pytest.mark.parametrize("queues", [1, 3])  # 1: units adjacent; 3: interleaved
def test_raw_units_are_the_stored_units_across_segments(open_store: Open, queues: int) -> None:
    store = open_store()
    store.put_messages([make_message(i, queue_id=i % queues) for i in range(300)])
    assert store.wait_dispatched() and len(store.commitlog.segments()) > 2
    for qid in range(queues):
        got = store.get_raw(QueueRead("orders", qid, 0, 1_000))
        assert got.raw is not None and got.found == got.raw.count == 300 // queues
        messages = _decoded(got.raw.data, got.raw.sizes)
        assert [int(m.properties["n"]) for m in messages] == list(range(qid, 300, queues))
        plain = store.get_messages(QueueRead("orders", qid, 0, 1_000)).messages
        assert [m.physical_offset for m in messages] == [m.physical_offset for m in plain]
        assert got.next_offset == got.max_offset == 300 // queues


def test_raw_reads_honour_counts_bytes_filters_and_bounds(open_store: Open) -> None:
    store = open_store()
    store.put_messages([make_message(i, size=200) for i in range(50)])
    assert store.wait_dispatched()
    assert store.get_raw(QueueRead("orders", 0, 10, 5)).next_offset == 15
    budget = store.get_raw(QueueRead("orders", 0, 0, 50, max_bytes=1_000))
    assert budget.raw is not None and 0 < budget.raw.count < 50
    assert len(budget.raw.data) <= 1_000 or budget.raw.count == 1
    odd = store.get_raw(QueueRead("orders", 0, 0, 50, message_filter=lambda m: m.tag == "odd"))
    assert odd.raw is not None and odd.messages == []
    assert [m.queue_offset for m in _decoded(odd.raw.data, odd.raw.sizes)] == list(range(1, 50, 2))
    end = store.get_raw(QueueRead("orders", 0, 50, 10))
    assert end.raw is not None and end.raw.count == 0 and end.next_offset == 50
    with pytest.raises(OffsetOutOfRangeError):
        store.get_raw(QueueRead("orders", 0, 51, 10))


def test_a_large_dense_read_is_cut_into_regions_not_read_unit_by_unit(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker_core.store import raw_read
    from broker_core.store.mapped_file import MappedFile

    store = open_store()
    store.put_messages([make_message(i, queue_id=i % 4) for i in range(400)])
    assert store.wait_dispatched()
    want = {qid: store.get_raw(QueueRead("orders", qid, 0, 1_000)).raw for qid in range(4)}
    unit_bytes = int(next(iter(want.values())).sizes[0])  # type: ignore[union-attr]
    monkeypatch.setattr(raw_read, "MAX_REGION_BYTES", 10 * 4 * unit_bytes)  # ~10 units
    reads: list[int] = []
    real_read, real_into = MappedFile.read, MappedFile.read_into
    monkeypatch.setattr(
        MappedFile, "read", lambda self, pos, size: reads.append(size) or real_read(self, pos, size)
    )
    monkeypatch.setattr(
        MappedFile,
        "read_into",
        lambda self, pos, out: reads.append(len(out)) or real_into(self, pos, out),
    )
    for qid in range(4):
        reads.clear()
        got = store.get_raw(QueueRead("orders", qid, 0, 1_000)).raw
        assert got is not None and want[qid] is not None
        assert got.data == want[qid].data  # type: ignore[union-attr]
        assert 0 < len(reads) < got.count // 2  # whole regions, not one read per unit
        assert max(reads) <= raw_read.MAX_REGION_BYTES
