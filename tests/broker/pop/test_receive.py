"""POP receive and ack over a real store: handles, argument checks, offset resets, initial
offsets, dead-letter and retry topics as sources."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker_core.broker.pop.policy import revive_copy
from broker_core.broker.pop.pop import PopService
from broker_core.broker.pop.receipt import ReceiptHandle, decode_handle
from broker_core.errors import (
    InvalidArgumentError,
    InvalidGroupError,
    InvalidReceiptHandleError,
    StaleReceiptHandleError,
    StoreClosedError,
)
from broker_core.protocol.filters import MessageFilter
from tests.broker.pop.conftest import INVISIBLE_MS, T0, Broker, ns
from tests.store.conftest import make_message


def test_receive_then_ack_commits_offset(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(5)])
    got = broker.receive(max_count=10)
    assert ns(got) == [0, 1, 2, 3, 4]
    assert {p.delivery_attempt for p in got} == {1}
    assert {p.topic for p in got} == {"orders"}
    assert len({p.receipt_handle for p in got}) == 5
    assert got[0].invisible_until_ms == T0 + INVISIBLE_MS
    assert got[0].message_id == "ID0000000000"
    assert broker.receive() == []  # all in flight
    for p in got[1:]:
        broker.pop.ack("g", "orders", p.receipt_handle)
    assert broker.pop.consume_offset("g", "orders", 0) == 0  # offset 0 still in flight
    broker.pop.ack("g", "orders", got[0].receipt_handle)
    assert broker.pop.consume_offset("g", "orders", 0) == 5
    assert broker.offsets.query("g", "orders", 0) == 5
    assert broker.pop.inflight_count() == 0
    assert broker.revive_at(10 * INVISIBLE_MS) == 0
    assert broker.receive() == []


def test_receive_honours_max_count_and_queues(broker: Broker) -> None:
    broker.produce([make_message(i, queue_id=i % 2) for i in range(6)])
    first = broker.receive(qids=(0, 1), max_count=4)
    second = broker.receive(qids=(0, 1), max_count=4)
    assert sorted(ns(first) + ns(second)) == list(range(6))
    assert len(first) == 4 and broker.receive(qids=(0, 1)) == []


def test_filtered_out_messages_count_as_consumed(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(6)])
    got = broker.receive(flt=MessageFilter("TAG", "even"))
    assert ns(got) == [0, 2, 4]
    for p in got:
        broker.pop.ack("g", "orders", p.receipt_handle)
    assert broker.pop.consume_offset("g", "orders", 0) == 6
    assert broker.receive() == []  # odd ones were consumed by the filter


def test_two_consumers_never_share_an_in_flight_message(broker: Broker) -> None:
    broker.produce([make_message(i, queue_id=i % 3) for i in range(60)])
    seen: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def consumer() -> None:
        start.wait()
        while got := broker.receive(qids=(0, 1, 2), max_count=3):
            with lock:
                seen.extend(ns(got))

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(60))


def test_handle_errors(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(2)])
    first, second = broker.receive()
    for garbage in ("", "garbage", first.receipt_handle[:-3]):
        with pytest.raises(InvalidReceiptHandleError):
            broker.pop.ack("g", "orders", garbage)
    with pytest.raises(InvalidReceiptHandleError, match="topic"):
        broker.pop.ack("g", "payments", first.receipt_handle)
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("other-group", "orders", first.receipt_handle)
    foreign = decode_handle(first.receipt_handle)
    other_broker = ReceiptHandle(
        foreign.topic,
        foreign.queue_id,
        foreign.queue_offset,
        foreign.checkpoint_offset,
        foreign.pop_time_ms,
        foreign.invisible_ms,
        "broker-z",
    )
    with pytest.raises(InvalidReceiptHandleError, match="broker"):
        broker.pop.ack("g", "orders", other_broker.encode())
    broker.pop.ack("g", "orders", first.receipt_handle)
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", first.receipt_handle)  # already acked
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.change_invisible_duration("g", "orders", first.receipt_handle, 1)
    broker.revive_at(INVISIBLE_MS)
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", second.receipt_handle)  # redelivered meanwhile


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_count": 0},
        {"max_count": 10_000},
        {"invisible_ms": 0},
        {"invisible_ms": 13 * 3_600_000},
        {"qids": (-1,)},
    ],
)
def test_bad_receive_arguments(broker: Broker, kwargs: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        broker.receive(**kwargs)


def test_bad_group_and_closed_service(broker: Broker) -> None:
    with pytest.raises(InvalidGroupError):
        broker.receive(group="bad group")
    broker.pop.close()
    with pytest.raises(StoreClosedError):
        broker.receive()
    broker.pop.open()
    assert broker.receive() == []


# --------------------------------------------------------------------------- resets, starts


def test_reset_reaches_live_state_and_ends_deliveries(broker: Broker) -> None:
    broker.produce([make_message(i) for i in range(4)])
    got = broker.receive()
    for p in got[:3]:
        broker.pop.ack("g", "orders", p.receipt_handle)  # offset 3 stays in flight
    broker.pop.reset_offset("g", "orders", 0, 1)
    assert broker.offsets.query("g", "orders", 0) == 1
    assert broker.pop.inflight_count() == 0
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", got[3].receipt_handle)  # ended by the reset
    again = broker.receive()
    assert ns(again) == [1, 2, 3] and {p.delivery_attempt for p in again} == {1}
    broker.pop.ack("g", "orders", again[0].receipt_handle)
    broker.restart()  # the reset and what followed it survive: 2 and 3 still in flight
    assert broker.pop.inflight_count() == 2 and broker.receive() == []


@pytest.mark.parametrize("crash", [False, True])
def test_reset_survives_a_restart(broker: Broker, crash: bool) -> None:
    broker.produce([make_message(i) for i in range(5)])
    for p in broker.receive():
        broker.pop.ack("g", "orders", p.receipt_handle)
    broker.pop.reset_offset("g", "orders", 0, 0)
    broker.crash_restart() if crash else broker.restart()
    assert ns(broker.receive()) == [0, 1, 2, 3, 4]  # the acks before the reset count no more


def test_new_queue_starts_at_the_initial_offset_and_commits_it(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    broker.produce([make_message(i) for i in range(3)])
    broker.pop.close()
    broker.pop = PopService(
        broker.store,
        broker.offsets,
        broker.config,
        clock_ms=broker.clock,
        initial_offset=lambda g, t, q: broker.store.max_offset(t, q),
    )
    broker.pop.open()
    try:
        assert broker.receive() == []  # starts after the old messages
        assert broker.offsets.query("g", "orders", 0) == 3  # committed at once, durably:
        broker.crash_restart()  # (a replay would otherwise start at the minimum)
        assert broker.receive() == []
        broker.produce([make_message(3)])
        assert ns(broker.receive()) == [3]
    finally:
        broker.close()


def test_a_dead_letter_topic_is_delivered_and_acked_as_itself(broker: Broker) -> None:
    broker.produce([make_message(0)])
    broker.produce([revive_copy(broker.topic_messages("orders")[0], "%DLQ%g", 3)])
    (got,) = broker.receive("drainer", "%DLQ%g")
    assert got.topic == "%DLQ%g"  # not "orders": the drainer subscribed to the DLQ
    broker.pop.ack("drainer", "%DLQ%g", got.receipt_handle)
    assert broker.receive("drainer", "%DLQ%g") == []


def test_retry_topic_first_last_or_not_at_all(broker: Broker) -> None:
    """``retry="last"`` (PRIORITY topics) ranks retries below every queue; ``"none"`` (lite
    topics) leaves them out; the default reads them first."""
    broker.produce([make_message(0)])
    broker.receive()
    assert broker.revive_at(INVISIBLE_MS) == 1  # message 0 now waits in %RETRY%g
    broker.produce([make_message(1, queue_id=1), make_message(2, queue_id=1)])

    def take(retry: str, max_count: int = 1) -> list[int]:
        popped = broker.pop.receive(
            "g", "orders", [1, 0], max_count=max_count, invisible_ms=INVISIBLE_MS, retry=retry
        )
        for p in popped:
            broker.pop.ack("g", "orders", p.receipt_handle)
        return ns(popped)

    assert take("last") == [1]
    assert take("none", 5) == [2]  # message 0 waits in the retry topic, left out
    broker.produce([make_message(3, queue_id=1)])
    assert take("first") == [0]
    assert take("first") == [3]
