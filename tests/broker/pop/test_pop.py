"""POP consumption over a real store: receive/ack, invisible time, revive, DLQ, FIFO, restart."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pop.log import PopRecord, RecordKind
from broker_core.broker.pop.policy import (
    Destination,
    original_topic,
    revive_copy,
    revive_decision,
)
from broker_core.broker.pop.pop import REVIVE_GROUP, PopConfig, PoppedMessage, PopService
from broker_core.broker.pop.receipt import ReceiptHandle, decode_handle
from broker_core.broker.retry import RetryPolicy
from broker_core.broker.system_topics import REVIVE_TOPIC
from broker_core.errors import (
    CorruptionError,
    InvalidArgumentError,
    InvalidGroupError,
    InvalidReceiptHandleError,
    StaleReceiptHandleError,
    StoreClosedError,
)
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
)
from broker_core.protocol.filters import MessageFilter
from broker_core.protocol.unit import SYSFLAG_TRANSACTION_COMMIT
from broker_core.store.message_store import MessageStore
from tests.store.conftest import make_message, small_config

T0 = 1_700_000_000_000
S = 1_000
INVISIBLE_MS = 30 * S


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Broker:
    """A store, offsets and a POP service on tmp_path that can be restarted or crashed."""

    def __init__(self, root: Path, config: PopConfig | None = None) -> None:
        self.root = root
        self.clock = Clock()
        self.fifo_groups: set[str] = set()
        self.policies: dict[str, RetryPolicy] = {}
        self.config = config or PopConfig()
        self.store: MessageStore | None = None
        self.open()

    @property
    def offsets_path(self) -> Path:
        return self.root / "config" / "consumerOffset.json"

    def open(self) -> None:
        self.store = MessageStore(small_config(self.root / "store"))
        self.store.open()
        self.offsets = ConsumerOffsetManager(self.offsets_path)
        self.pop = PopService(
            self.store,
            self.offsets,
            self.config,
            clock_ms=self.clock,
            retry_policy_for=lambda g: self.policies.get(g, RetryPolicy()),
            is_fifo=lambda g: g in self.fifo_groups,
        )
        self.pop.open()
        self.store.wait_dispatched()

    def close(self) -> None:
        if self.store is not None:
            self.pop.close()
            self.store.close()
            self.store = None

    def restart(self) -> None:
        self.close()
        self.open()

    def crash_restart(self) -> None:
        """Stop without persisting consumer offsets: only what was persisted earlier survives."""
        assert self.store is not None
        self.pop.stop()
        self.store.close()  # the revive log is in the store; offsets were never written
        self.store = None
        self.open()

    def produce(self, messages: list[Message]) -> None:
        assert self.store is not None
        self.store.put_messages(messages)
        assert self.store.wait_dispatched()

    def receive(
        self,
        group: str = "g",
        topic: str = "orders",
        qids: tuple[int, ...] = (0,),
        max_count: int = 32,
        invisible_ms: int = INVISIBLE_MS,
        flt: MessageFilter | None = None,
    ) -> list[PoppedMessage]:
        return self.pop.receive(
            group, topic, list(qids), max_count=max_count, invisible_ms=invisible_ms, filter=flt
        )

    def revive_at(self, ms_after_t0: int) -> int:
        assert self.store is not None
        self.clock.now = T0 + ms_after_t0
        count = self.pop.run_revive()
        assert self.store.wait_dispatched()
        return count

    def topic_messages(self, topic: str) -> list[StoredMessage]:
        assert self.store is not None
        assert self.store.wait_dispatched()
        return self.store.get_messages(topic, 0, self.store.min_offset(topic, 0), 1000).messages


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def ns(popped: list[PoppedMessage]) -> list[int]:
    return [int(p.message.properties["n"]) for p in popped]


def grouped(i: int, group: str, queue_id: int = 0) -> Message:
    msg = make_message(i, queue_id=queue_id)
    msg.properties[PROPERTY_MESSAGE_GROUP] = group
    return msg


# --------------------------------------------------------------------------- receive / ack


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


# --------------------------------------------------------------------------- expiry / retry


def test_expiry_redelivers_via_retry_topic_keeping_id(broker: Broker) -> None:
    broker.produce([make_message(0)])
    (first,) = broker.receive()
    assert broker.revive_at(INVISIBLE_MS - 1) == 0
    assert broker.revive_at(INVISIBLE_MS) == 1
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", first.receipt_handle)
    (again,) = broker.receive()
    assert again.delivery_attempt == 2
    assert again.message_id == first.message_id == "ID0000000000"
    assert again.topic == "orders" and again.message.topic == "%RETRY%g"
    assert again.message.body == first.message.body
    props = again.message.properties
    assert props[PROPERTY_RETRY_TOPIC] == "orders"
    assert props[PROPERTY_ORIGIN_MESSAGE_ID] == "ID0000000000"
    assert again.message.reconsume_times == 1
    assert broker.pop.consume_offset("g", "orders", 0) == 1  # the original is resolved
    broker.pop.ack("g", "orders", again.receipt_handle)
    assert broker.pop.consume_offset("g", "%RETRY%g", 0) == 1
    assert broker.revive_at(10 * INVISIBLE_MS) == 0 and broker.receive() == []


def test_change_invisible_duration_extends_and_stales_old_handle(broker: Broker) -> None:
    broker.produce([make_message(0)])
    (got,) = broker.receive()
    broker.clock.advance(10 * S)
    newer = broker.pop.change_invisible_duration("g", "orders", got.receipt_handle, 60 * S)
    assert decode_handle(newer).deadline_ms == T0 + 70 * S
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", got.receipt_handle)
    assert broker.revive_at(INVISIBLE_MS) == 0  # the old deadline no longer applies
    assert broker.receive() == []
    assert broker.revive_at(70 * S - 1) == 0
    newest = broker.pop.change_invisible_duration("g", "orders", newer, 5 * S)
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", newer)
    assert broker.revive_at(75 * S) == 1
    (again,) = broker.receive()
    assert again.delivery_attempt == 2
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", newest)


def test_retries_exhausted_go_to_dlq(broker: Broker) -> None:
    broker.policies["g"] = RetryPolicy(max_retries=2)
    broker.produce([make_message(0)])
    attempts = []
    for round_ in range(3):
        (got,) = broker.receive()
        attempts.append(got.delivery_attempt)
        assert broker.revive_at((round_ + 1) * INVISIBLE_MS) == 1
    assert attempts == [1, 2, 3]
    assert broker.receive() == []
    assert broker.revive_at(100 * INVISIBLE_MS) == 0 and broker.receive() == []
    (dead,) = broker.topic_messages("%DLQ%g")
    assert dead.message_id == "ID0000000000"
    assert dead.properties[PROPERTY_RETRY_TOPIC] == "orders"
    assert dead.reconsume_times == 3 and dead.body.startswith(b"message-0|")
    assert len(broker.topic_messages("%RETRY%g")) == 2
    assert broker.pop.inflight_count() == 0


def test_nack_uses_backoff_then_dlq(broker: Broker) -> None:
    broker.policies["g"] = RetryPolicy.custom([5 * S, 7 * S], max_retries=1)
    broker.produce([make_message(0)])
    (got,) = broker.receive()
    broker.pop.nack("g", "orders", got.receipt_handle)
    assert broker.revive_at(5 * S - 1) == 0
    assert broker.revive_at(5 * S) == 1
    (again,) = broker.receive()
    assert again.delivery_attempt == 2
    broker.pop.nack("g", "orders", again.receipt_handle)  # retries used up: DLQ at once
    assert [m.message_id for m in broker.topic_messages("%DLQ%g")] == ["ID0000000000"]
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", again.receipt_handle)


def test_nack_with_explicit_delay_and_forward_to_dlq(broker: Broker) -> None:
    broker.produce([make_message(0), make_message(1)])
    first, second = broker.receive()
    broker.pop.nack("g", "orders", first.receipt_handle, delay_ms=2 * S)
    broker.pop.forward_to_dlq("g", "orders", second.receipt_handle)
    (dead,) = broker.topic_messages("%DLQ%g")
    assert dead.message_id == second.message_id and dead.reconsume_times == 1
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.forward_to_dlq("g", "orders", second.receipt_handle)
    assert broker.revive_at(2 * S) == 1
    assert ns(broker.receive()) == [0]
    assert broker.pop.consume_offset("g", "orders", 0) == 2


def test_retry_copy_from_retry_topic_can_be_acked_with_either_topic(broker: Broker) -> None:
    broker.produce([make_message(0)])
    broker.receive()
    broker.revive_at(INVISIBLE_MS)
    (again,) = broker.receive()
    assert decode_handle(again.receipt_handle).topic == "%RETRY%g"
    broker.pop.ack("g", "%RETRY%g", again.receipt_handle)
    assert broker.pop.inflight_count() == 0


def test_revive_thread_runs_in_background(tmp_path: Path) -> None:
    b = Broker(tmp_path, PopConfig(revive_interval_ms=5))
    try:
        assert b.store is not None
        revived = threading.Event()
        b.store.add_dispatch_listener(
            lambda topic, _qid, _max: revived.set() if topic == "%RETRY%g" else None
        )
        b.produce([make_message(0)])
        b.receive()
        b.clock.advance(INVISIBLE_MS)
        b.pop.start()
        assert revived.wait(5)
        b.pop.stop()
        assert b.pop.inflight_count() == 0 and b.pop.failure is None
    finally:
        b.close()


# --------------------------------------------------------------------------- FIFO


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


# --------------------------------------------------------------------------- restart


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


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    "fifo, max_retries, attempt, destination, topic",
    [
        (False, 16, 1, Destination.RETRY, "%RETRY%g"),
        (False, 16, 16, Destination.RETRY, "%RETRY%g"),
        (False, 16, 17, Destination.DLQ, "%DLQ%g"),
        (False, 0, 1, Destination.DLQ, "%DLQ%g"),
        (False, 2, 2, Destination.RETRY, "%RETRY%g"),
        (False, 2, 3, Destination.DLQ, "%DLQ%g"),
        (True, 16, 1, Destination.IN_PLACE, "orders"),
        (True, 2, 2, Destination.IN_PLACE, "orders"),
        (True, 2, 3, Destination.DLQ, "%DLQ%g"),
        (True, 0, 1, Destination.DLQ, "%DLQ%g"),
    ],
)
def test_revive_decision_table(fifo, max_retries, attempt, destination, topic) -> None:
    decision = revive_decision(
        "g", "orders", attempt, RetryPolicy(max_retries=max_retries), fifo=fifo, now_ms=T0
    )
    assert (decision.destination, decision.topic, decision.reconsume_times) == (
        destination,
        topic,
        attempt,
    )


def test_revive_decision_rejects_attempt_zero() -> None:
    with pytest.raises(InvalidArgumentError):
        revive_decision("g", "orders", 0, RetryPolicy(), fifo=False, now_ms=T0)


def _stored(topic: str, props: dict[str, str], sys_flag: int = 0) -> StoredMessage:
    return StoredMessage(
        topic,
        0,
        7,
        4096,
        b"body",
        props,
        3,
        sys_flag,
        T0,
        ("10.0.0.1", 9),
        T0,
        ("127.0.0.1", 8081),
        0,
        0,
        0,
        100,
    )


@pytest.mark.parametrize(
    "topic, props, expected",
    [
        ("orders", {}, "orders"),
        ("orders", {PROPERTY_RETRY_TOPIC: "other"}, "orders"),
        ("%RETRY%g", {PROPERTY_RETRY_TOPIC: "orders"}, "orders"),
        ("%DLQ%g", {PROPERTY_RETRY_TOPIC: "orders"}, "orders"),
        ("%RETRY%g", {}, "%RETRY%g"),
    ],
)
def test_original_topic_table(topic: str, props: dict[str, str], expected: str) -> None:
    assert original_topic(_stored(topic, props)) == expected


def test_revive_copy_keeps_identity_and_drops_delay() -> None:
    src = _stored("orders", {PROPERTY_DELAY_LEVEL: "3", "k": "v"}, SYSFLAG_TRANSACTION_COMMIT)
    copy = revive_copy(src, "%RETRY%g", 2)
    assert copy.topic == "%RETRY%g" and copy.queue_id == 0 and copy.reconsume_times == 2
    assert copy.properties[PROPERTY_UNIQ_KEY] == src.message_id  # the offset id becomes it
    assert copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == src.message_id
    assert copy.properties[PROPERTY_RETRY_TOPIC] == "orders"
    assert PROPERTY_DELAY_LEVEL not in copy.properties and copy.properties["k"] == "v"
    assert copy.sys_flag == 0 and copy.flag == 3 and copy.body == b"body"
    again = revive_copy(_stored("%RETRY%g", copy.properties), "%DLQ%g", 3)
    assert again.properties[PROPERTY_UNIQ_KEY] == src.message_id
    assert again.properties[PROPERTY_RETRY_TOPIC] == "orders"


CHECKPOINT = PopRecord(
    RecordKind.CHECKPOINT,
    "g",
    "orders",
    3,
    17,
    anchor=5,
    time_ms=T0,
    invisible_ms=30_000,
    attempt=2,
    message_group="A",
)


@pytest.mark.parametrize(
    "record",
    [
        CHECKPOINT,
        PopRecord(RecordKind.ACK, "g", "%RETRY%g", 0, 1, resolves=9, time_ms=T0),
        PopRecord(RecordKind.DEAD_LETTERED, "组", "订单", 1, 2, resolves=3, message_group="组"),
    ],
)
def test_pop_record_round_trip(record: PopRecord) -> None:
    assert PopRecord.decode(record.encode()) == record


@pytest.mark.parametrize("cut", [0, 10, 50, 52])
def test_pop_record_corruption_is_an_error(cut: int) -> None:
    raw = PopRecord(RecordKind.ACK, "g", "orders", 0, 1, resolves=2).encode()
    with pytest.raises(CorruptionError, match="revive offset 7"):
        PopRecord.decode(raw[:cut], 7)
    with pytest.raises(CorruptionError):
        PopRecord.decode(raw + b"x")
    with pytest.raises(CorruptionError):
        PopRecord.decode(b"\x09" + raw[1:])


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
