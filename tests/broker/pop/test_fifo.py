"""POP for FIFO groups: one message group in flight at a time, redelivery in place, bounded
withholding."""

from __future__ import annotations

from pathlib import Path

from broker_core.broker.pop.model import PopConfig
from broker_core.broker.retry import RetryPolicy
from tests.broker.pop.conftest import INVISIBLE_MS, Broker, grouped, ns
from tests.store.conftest import make_message


def test_fifo_withholds_next_of_same_group_until_ack(broker: Broker) -> None:
    broker.fifo_groups.add("g")
    broker.produce(
        [
            grouped(0, "A"),
            grouped(1, "A"),
            grouped(2, "B"),
            grouped(3, "B"),
            grouped(4, "A"),
            make_message(5),
            make_message(6),
        ]
    )
    got = broker.receive()
    assert ns(got) == [0, 2, 5, 6]  # no message group: never waits
    assert broker.receive() == []
    by_n = {int(p.message.properties["n"]): p for p in got}
    broker.pop.ack("g", "orders", by_n[0].receipt_handle)
    assert ns(broker.receive()) == [1]
    broker.pop.ack("g", "orders", by_n[2].receipt_handle)
    (b3,) = broker.receive()
    assert ns([b3]) == [3]
    assert broker.pop.consume_offset("g", "orders", 0) == 1  # A1 in flight


def test_fifo_redelivers_in_place_keeping_order(broker: Broker) -> None:
    broker.fifo_groups.add("g")
    broker.produce([grouped(0, "A"), grouped(1, "A"), grouped(2, "B")])
    assert ns(broker.receive()) == [0, 2]
    assert broker.revive_at(INVISIBLE_MS) == 2
    again = broker.receive()
    assert ns(again) == [0, 2]
    assert [p.delivery_attempt for p in again] == [2, 2]
    assert [p.message.queue_offset for p in again] == [0, 2]
    assert {p.message.topic for p in again} == {"orders"}
    assert broker.topic_messages("%RETRY%g") == []
    assert broker.receive() == []  # A1 still waits for A0
    broker.pop.ack("g", "orders", again[0].receipt_handle)
    assert ns(broker.receive()) == [1]


def test_fifo_dlq_after_max_retries_unblocks_group(broker: Broker) -> None:
    broker.fifo_groups.add("g")
    broker.policies["g"] = RetryPolicy(max_retries=1)
    broker.produce([grouped(0, "A"), grouped(1, "A")])
    assert [p.delivery_attempt for p in broker.receive()] == [1]
    broker.revive_at(INVISIBLE_MS)
    assert [p.delivery_attempt for p in broker.receive()] == [2]
    broker.revive_at(2 * INVISIBLE_MS)
    assert [m.message_id for m in broker.topic_messages("%DLQ%g")] == ["ID0000000000"]
    (nxt,) = broker.receive()
    assert ns([nxt]) == [1] and nxt.delivery_attempt == 1


def test_fifo_withheld_window_is_bounded(tmp_path: Path) -> None:
    b = Broker(tmp_path, PopConfig(max_withheld_per_queue=3))
    b.fifo_groups.add("g")
    try:
        b.produce([grouped(i, "A") for i in range(6)] + [grouped(6, "B")])
        (a0,) = b.receive()  # A1..A3 withheld, then the window is full: B6 is not reached
        assert ns([a0]) == [0]
        b.pop.ack("g", "orders", a0.receipt_handle)
        (a1,) = b.receive()
        assert ns([a1]) == [1]
        b.pop.ack("g", "orders", a1.receipt_handle)
        assert ns(b.receive()) == [2]
    finally:
        b.close()
