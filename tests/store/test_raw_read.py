"""Raw reads (``MessageStore.get_raw``): the stored units of a queue range, undecoded."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from broker_core.errors import OffsetOutOfRangeError
from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.message_store import MessageStore
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
        got = store.get_raw("orders", qid, 0, 1_000)
        assert got.raw is not None and got.found == got.raw.count == 300 // queues
        messages = _decoded(got.raw.data, got.raw.sizes)
        assert [int(m.properties["n"]) for m in messages] == list(range(qid, 300, queues))
        plain = store.get_messages("orders", qid, 0, 1_000).messages
        assert [m.physical_offset for m in messages] == [m.physical_offset for m in plain]
        assert got.next_offset == got.max_offset == 300 // queues


def test_raw_reads_honour_counts_bytes_filters_and_bounds(open_store: Open) -> None:
    store = open_store()
    store.put_messages([make_message(i, size=200) for i in range(50)])
    assert store.wait_dispatched()
    assert store.get_raw("orders", 0, 10, 5).next_offset == 15
    budget = store.get_raw("orders", 0, 0, 50, max_bytes=1_000)
    assert budget.raw is not None and 0 < budget.raw.count < 50
    assert len(budget.raw.data) <= 1_000 or budget.raw.count == 1
    odd = store.get_raw("orders", 0, 0, 50, message_filter=lambda m: m.tag == "odd")
    assert odd.raw is not None and odd.messages == []
    assert [m.queue_offset for m in _decoded(odd.raw.data, odd.raw.sizes)] == list(range(1, 50, 2))
    end = store.get_raw("orders", 0, 50, 10)
    assert end.raw is not None and end.raw.count == 0 and end.next_offset == 50
    with pytest.raises(OffsetOutOfRangeError):
        store.get_raw("orders", 0, 51, 10)
