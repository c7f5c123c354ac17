"""POP across restarts and crashes: in-flight deliveries, attempts, acks and handles survive;
a random model check with restarts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from broker_core.broker.pop.pop import REVIVE_GROUP
from broker_core.broker.retry import RetryPolicy
from broker_core.broker.system_topics import REVIVE_TOPIC
from broker_core.errors import StaleReceiptHandleError
from broker_core.message import PROPERTY_MESSAGE_GROUP, PROPERTY_UNIQ_KEY
from broker_core.protocol.filters import MessageFilter
from tests.broker.pop.conftest import INVISIBLE_MS, T0, Broker, S, grouped, ns
from tests.store.conftest import make_message


def test_restart_keeps_in_flight_and_acks(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(6)])
    got = broker.receive()
    for i in (0, 2, 4):
        broker.pop.ack("g", "orders", got[i].receipt_handle)
    extended = broker.pop.change_invisible_duration("g", "orders", got[1].receipt_handle, 60 * S)
    broker.restart()
    assert broker.pop.inflight_count() == 3
    assert broker.receive() == []
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", got[0].receipt_handle)  # acked before the restart
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", got[1].receipt_handle)  # superseded before the restart
    broker.pop.ack("g", "orders", got[3].receipt_handle)  # current handles stay valid
    assert broker.revive_at(INVISIBLE_MS) == 1
    (five,) = broker.receive()
    assert ns([five]) == [5] and five.delivery_attempt == 2
    broker.pop.ack("g", "orders", five.receipt_handle)
    assert broker.revive_at(60 * S) == 1
    (one,) = broker.receive()
    assert ns([one]) == [1] and one.delivery_attempt == 2
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", extended)
    assert broker.pop.consume_offset("g", "orders", 0) == 6


def test_restart_preserves_attempts_of_retry_copies(broker: Broker) -> None:
    broker.produce([make_message(0)])
    broker.receive()
    broker.revive_at(INVISIBLE_MS)
    (second,) = broker.receive()
    assert second.delivery_attempt == 2
    broker.restart()
    assert broker.revive_at(2 * INVISIBLE_MS) == 1
    (third,) = broker.receive()
    assert third.delivery_attempt == 3 and third.message_id == "ID0000000000"


def test_expiry_during_downtime_is_revived_on_open(broker: Broker) -> None:
    broker.produce([make_message(0), make_message(1)])
    first, _ = broker.receive()
    broker.pop.ack("g", "orders", first.receipt_handle)
    broker.close()
    broker.clock.advance(INVISIBLE_MS + 1)
    broker.open()
    (again,) = broker.receive()
    assert ns([again]) == [1] and again.delivery_attempt == 2


def test_fifo_restart_keeps_order_and_blocking(broker: Broker) -> None:
    broker.fifo_groups.add("g")
    broker.produce([grouped(0, "A"), grouped(1, "A"), grouped(2, "B"), grouped(3, "B")])
    a0, b2 = broker.receive()
    broker.pop.ack("g", "orders", b2.receipt_handle)
    broker.restart()
    assert ns(broker.receive()) == [3]  # B moves on; A1 waits; the acked B2 is not redelivered
    broker.pop.ack("g", "orders", a0.receipt_handle)  # a handle from before the restart
    assert ns(broker.receive()) == [1]


def test_fifo_restart_preserves_attempts_in_place(broker: Broker) -> None:
    broker.fifo_groups.add("g")
    broker.produce([grouped(0, "A"), grouped(1, "A")])
    broker.receive()
    broker.revive_at(INVISIBLE_MS)
    assert [p.delivery_attempt for p in broker.receive()] == [2]
    broker.restart()
    broker.revive_at(2 * INVISIBLE_MS)
    broker.restart()  # restart while the message is visible again but not yet retaken
    (got,) = broker.receive()
    assert ns([got]) == [0] and got.delivery_attempt == 3


def test_crash_without_persisted_offsets_replays_whole_log(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(5)])
    got = broker.receive()
    for p in got[1:]:
        broker.pop.ack("g", "orders", p.receipt_handle)
    handle = broker.pop.change_invisible_duration("g", "orders", got[0].receipt_handle, 60 * S)
    assert not broker.offsets_path.exists()
    broker.crash_restart()  # nothing was persisted: replay from revive offset 0
    assert broker.pop.inflight_count() == 1
    assert broker.receive() == []
    broker.crash_restart()  # again, before any receive passes the acked offsets
    assert broker.revive_at(60 * S) == 1
    (again,) = broker.receive()
    assert ns([again]) == [0] and again.delivery_attempt == 2
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", handle)
    assert broker.receive() == []


def test_acked_above_in_flight_survive_repeated_restarts(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(5)])
    got = broker.receive()
    for p in got[1:]:
        broker.pop.ack("g", "orders", p.receipt_handle)
    broker.pop.change_invisible_duration("g", "orders", got[0].receipt_handle, 60 * S)
    for _ in range(3):
        broker.restart()
        assert broker.receive() == []
    broker.produce([make_message(5)])
    assert ns(broker.receive()) == [5]


def test_replay_start_advances_so_memory_follows_in_flight(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(20)])
    for p in broker.receive():
        broker.pop.ack("g", "orders", p.receipt_handle)
    assert broker.store is not None and broker.store.wait_dispatched()
    log_end = broker.store.max_offset(REVIVE_TOPIC, 0)
    assert log_end == 40  # one checkpoint and one ack per message
    assert broker.offsets.query(REVIVE_GROUP, REVIVE_TOPIC, 0) == log_end
    broker.restart()
    assert broker.pop.inflight_count() == 0
    assert broker.receive() == []


def test_filter_with_restart_in_between(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(6)])
    even = MessageFilter("TAG", "even")
    first, *_rest = broker.receive(flt=even)
    broker.pop.ack("g", "orders", first.receipt_handle)
    broker.restart()
    assert broker.receive(flt=even) == []
    assert broker.revive_at(INVISIBLE_MS) == 2
    assert sorted(ns(broker.receive(flt=even))) == [2, 4]
    assert broker.pop.consume_offset("g", "orders", 0) == 6


def test_message_gone_from_store_is_dropped(broker: Broker) -> None:
    broker.fifo_groups.add("f")
    broker.produce([make_message(0), grouped(1, "A"), grouped(2, "A")])
    assert ns(broker.receive(max_count=1)) == [0]
    assert ns(broker.receive(group="f", qids=(0,), max_count=8)) == [0, 1]
    assert broker.revive_at(INVISIBLE_MS) == 3  # f's are visible again in place
    assert broker.pop.inflight_count() == 2 and len(broker.topic_messages("%RETRY%g")) == 1
    (retried,) = broker.receive(max_count=1)  # the retry topic is read first
    assert retried.delivery_attempt == 2
    assert broker.store is not None
    broker.store.delete_topic("orders")  # as if retention removed the messages
    broker.store.delete_topic("%RETRY%g")
    assert broker.receive(group="f") == []  # nothing left to redeliver: dropped
    assert broker.revive_at(2 * INVISIBLE_MS) == 1  # the retry copy is gone too
    assert broker.topic_messages("%RETRY%g") == [] and broker.topic_messages("%DLQ%g") == []
    assert broker.pop.inflight_count() == 0
    broker.restart()
    assert broker.pop.inflight_count() == 0 and broker.receive(group="f") == []


# --------------------------------------------------------------------------- model check


def _model_run(b: Broker, rng: random.Random, fifo: bool, steps: int) -> None:
    """Random operations and restarts, checked against the guarantees after every step."""
    produced: list[str] = []
    order: dict[str, list[str]] = {}  # FIFO: message group -> ids in production order
    held: dict[str, tuple[str, int]] = {}  # id -> (current handle, deadline)
    acked: set[str] = set()
    for step in range(steps):
        roll = rng.random()
        if roll < 0.2:
            batch = []
            for _ in range(rng.randint(1, 4)):
                n = len(produced)
                group = rng.choice("ABC")
                msg = grouped(n, group, queue_id="ABC".index(group) % 2)  # A, C -> 0; B -> 1
                produced.append(msg.properties[PROPERTY_UNIQ_KEY])
                order.setdefault(msg.properties[PROPERTY_MESSAGE_GROUP], []).append(produced[-1])
                batch.append(msg)
            b.produce(batch)
        elif roll < 0.45:
            for p in b.receive(
                qids=(0, 1), max_count=rng.randint(1, 5), invisible_ms=rng.choice([5, 10, 20]) * S
            ):
                assert p.message_id not in acked, f"step {step}: acked message redelivered"
                assert p.message_id not in held, f"step {step}: message in flight twice"
                if fifo:
                    group_ids = order[p.message.properties[PROPERTY_MESSAGE_GROUP]]
                    done = acked | {m.message_id for m in b.topic_messages("%DLQ%g")}
                    earlier = group_ids[: group_ids.index(p.message_id)]
                    assert set(earlier) <= done, f"step {step}: FIFO order broken"
                held[p.message_id] = (p.receipt_handle, p.invisible_until_ms)
        elif roll < 0.65 and held:
            mid = rng.choice(sorted(held))
            b.pop.ack("g", "orders", held.pop(mid)[0])
            acked.add(mid)
        elif roll < 0.72 and held:
            mid = rng.choice(sorted(held))
            handle = b.pop.change_invisible_duration("g", "orders", held[mid][0], 15 * S)
            held[mid] = (handle, b.clock.now + 15 * S)
        elif roll < 0.9:
            b.revive_at(b.clock.now - T0 + rng.randint(1, 12) * S)
            held = {k: v for k, v in held.items() if v[1] > b.clock.now}
        elif roll < 0.95:
            b.restart()
        else:
            b.crash_restart()
    for _ in range(100):  # drain: everything ends acked or dead-lettered, exactly once
        b.revive_at(b.clock.now - T0 + 60 * S)
        got = b.receive(qids=(0, 1), invisible_ms=60 * S)
        if not got and b.pop.inflight_count() == 0:
            break
        for p in got:
            assert p.message_id not in acked
            b.pop.ack("g", "orders", p.receipt_handle)
            acked.add(p.message_id)
    dead = [m.message_id for m in b.topic_messages("%DLQ%g")]
    assert len(dead) == len(set(dead)) and not acked & set(dead)
    assert acked | set(dead) == set(produced)


@pytest.mark.parametrize("fifo", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_with_restarts(tmp_path: Path, seed: int, fifo: bool) -> None:
    b = Broker(tmp_path)
    b.policies["g"] = RetryPolicy(max_retries=3)
    if fifo:
        b.fifo_groups.add("g")
    try:
        _model_run(b, random.Random(seed), fifo, steps=250)
    finally:
        b.close()
