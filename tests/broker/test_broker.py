"""The broker facade over a real store: routing, reads, POP, offsets, queries, restart."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.groups import GroupConfig
from broker_core.broker.pull import PullRequest, PullStatus
from broker_core.broker.topics import Perm, TopicConfig
from broker_core.broker.transaction.transaction import CheckRequest
from broker_core.config import BrokerConfig
from broker_core.errors import (
    GroupNotFoundError,
    InvalidArgumentError,
    MessageNotFoundError,
    PermissionDeniedError,
    StaleReceiptHandleError,
    TopicNotFoundError,
)
from broker_core.message import Message
from broker_core.protocol.filters import MessageFilter
from tests.store.conftest import small_config

T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(tmp_path: Path, clock: Clock) -> Iterator[Broker]:
    b = Broker(
        BrokerConfig(default_queue_nums=2, transaction_check_timeout_ms=1_000),
        small_config(tmp_path / "store"),
        clock_ms=clock,
    )
    b.start()
    yield b
    b.stop()


def msg(topic: str, body: bytes, queue_id: int = 0, **props: str) -> Message:
    return Message(topic, body, queue_id=queue_id, properties=dict(props))


def bodies(broker: Broker, topic: str, queue_id: int = 0) -> list[bytes]:
    broker.store.wait_dispatched()
    return [m.body for m in broker.pulling.pull("g", PullRequest(topic, queue_id, 0, 100)).messages]


def test_send_auto_creates_the_topic_and_pull_reads_it(broker: Broker) -> None:
    results = broker.sending.send([msg("orders", b"a"), msg("orders", b"b", queue_id=1)])
    assert [(r.queue_id, r.queue_offset) for r in results] == [(0, 0), (1, 0)]
    assert all(len(r.message_id) == 34 for r in results)
    assert broker.topics.require("orders").write_queue_nums == 2
    assert bodies(broker, "orders") == [b"a"]
    assert broker.query_by_id(results[1].message_id).body == b"b"


def test_bad_sends_are_refused(broker: Broker) -> None:
    with pytest.raises(InvalidArgumentError, match="queue 5"):
        broker.sending.send([msg("orders", b"x", queue_id=5)])
    broker.topics.create_or_update(TopicConfig("readonly", perm=Perm.READ))
    with pytest.raises(PermissionDeniedError):
        broker.sending.send([msg("readonly", b"x")])
    with pytest.raises(InvalidArgumentError, match="delay level"):
        broker.sending.send([msg("orders", b"x", DELAY="99")])


def test_long_polling_pull_is_answered_when_a_message_arrives(broker: Broker) -> None:
    broker.sending.send([msg("events", b"first")])
    broker.store.wait_dispatched()
    answered = threading.Event()
    result = {}

    def poll() -> None:
        result["r"] = broker.pulling.pull("g", PullRequest("events", 0, 1, 10), timeout_ms=20_000)
        answered.set()

    threading.Thread(target=poll).start()
    broker.sending.send([msg("events", b"second")])
    assert answered.wait(10)
    assert result["r"].status is PullStatus.FOUND
    assert [m.body for m in result["r"].messages] == [b"second"]


def test_tag_filter_on_pull(broker: Broker) -> None:
    broker.sending.send(
        [msg("t", b"a", TAGS="A"), msg("t", b"b", TAGS="B"), msg("t", b"c", TAGS="A")]
    )
    broker.store.wait_dispatched()
    got = broker.pulling.pull("g", PullRequest("t", 0, 0, 10, filter=MessageFilter("TAG", "A")))
    assert [m.body for m in got.messages] == [b"a", b"c"]


def test_delay_level_holds_the_message_until_due(broker: Broker, clock: Clock) -> None:
    broker.sending.send([msg("orders", b"later", DELAY="2")])  # level 2 = 5 s
    broker.sending.send([msg("orders", b"now")])
    assert bodies(broker, "orders") == [b"now"]
    clock.now += 5_000
    broker.schedule.run_once(clock.now)
    assert bodies(broker, "orders") == [b"now", b"later"]


def test_a_held_message_is_found_by_the_topic_it_is_for(broker: Broker) -> None:
    [held] = broker.sending.send([msg("orders", b"later", DELAY="2")])
    broker.store.wait_dispatched()
    assert broker.query_by_id(held.message_id, "orders").body == b"later"
    assert [m.body for m in broker.query_by_key("orders", held.message_id)] == [b"later"]
    with pytest.raises(MessageNotFoundError):
        broker.query_by_id(held.message_id, "payments")


def test_timed_message_and_recall(broker: Broker, clock: Clock) -> None:
    due = str(T0 + 3_000)
    kept = broker.sending.send([msg("orders", b"kept", __STARTDELIVERTIME=due)])[0]
    gone = broker.sending.send([msg("orders", b"recalled", __STARTDELIVERTIME=due)])[0]
    assert kept.recall_handle and broker.sending.recall(gone.recall_handle)
    broker.store.wait_dispatched()
    broker.timer.run_once(clock.now)
    assert bodies(broker, "orders") == []
    clock.now += 4_000
    broker.store.wait_dispatched()
    broker.timer.run_once(clock.now)
    assert bodies(broker, "orders") == [b"kept"]


def test_recall_naming_another_topic_recalls_nothing(broker: Broker, clock: Clock) -> None:
    due = str(T0 + 3_000)
    sent = broker.sending.send([msg("orders", b"timed", __STARTDELIVERTIME=due)])[0]
    assert broker.sending.recall(sent.recall_handle, topic="payments") is False
    clock.now += 4_000
    broker.store.wait_dispatched()
    broker.timer.run_once(clock.now)
    assert bodies(broker, "orders") == [b"timed"]
    assert broker.sending.recall(sent.recall_handle, topic="orders") is False  # delivered already


def test_transaction_commit_rollback_and_check_back(broker: Broker, clock: Clock) -> None:
    asked: list[CheckRequest] = []
    broker.set_transaction_checker(asked.append)
    props = {"TRAN_MSG": "true"}
    a = broker.sending.send([msg("pay", b"commit-me", **props)], producer_group="pg")[0]
    b = broker.sending.send([msg("pay", b"roll-me", **props)], producer_group="pg")[0]
    c = broker.sending.send([msg("pay", b"ask-me", **props)], producer_group="pg")[0]
    assert bodies(broker, "pay") == []
    broker.sending.end_transaction(a.message_id, a.transaction_id, commit=True)
    broker.sending.end_transaction(b.message_id, b.transaction_id, commit=False)
    assert bodies(broker, "pay") == [b"commit-me"]
    clock.now += 2_000
    broker.transactions.run_checks(clock.now)
    assert [r.message_id for r in asked] == [c.message_id]
    broker.sending.end_transaction(c.message_id, c.transaction_id, commit=True, from_check=True)
    assert bodies(broker, "pay") == [b"commit-me", b"ask-me"]


def test_pop_receive_ack_and_redelivery(broker: Broker, clock: Clock) -> None:
    broker.sending.send([msg("jobs", b"j1"), msg("jobs", b"j2")])
    broker.store.wait_dispatched()
    got = broker.consuming.receive("workers", "jobs", max_count=10, invisible_ms=10_000)
    assert sorted(p.message.body for p in got) == [b"j1", b"j2"]
    done = next(p for p in got if p.message.body == b"j1")
    broker.consuming.ack("workers", "jobs", done.receipt_handle)
    assert broker.consuming.receive("workers", "jobs", max_count=10, invisible_ms=10_000) == []
    clock.now += 11_000
    broker.pop.run_revive(clock.now)
    broker.store.wait_dispatched()
    again = broker.consuming.receive("workers", "jobs", max_count=10, invisible_ms=10_000)
    assert [(p.message.body, p.delivery_attempt) for p in again] == [(b"j2", 2)]


def test_broadcasting_pop_keeps_progress_per_client(broker: Broker, clock: Clock) -> None:
    broker.groups.create_or_update(
        GroupConfig("fanout", broadcast=True, consume_from_where="first_offset")
    )
    broker.sending.send([msg("news", b"n1"), msg("news", b"n2")])
    broker.store.wait_dispatched()
    with pytest.raises(InvalidArgumentError, match="broadcasting: a consumer must send"):
        broker.consuming.receive("fanout", "news", max_count=10, invisible_ms=10_000)
    got = {
        cid: broker.consuming.receive(
            "fanout", "news", max_count=10, invisible_ms=10_000, client_id=cid
        )
        for cid in ("c1", "c2")
    }
    assert {cid: sorted(p.message.body for p in ps) for cid, ps in got.items()} == {
        "c1": [b"n1", b"n2"],
        "c2": [b"n1", b"n2"],
    }
    for p in got["c1"]:
        broker.consuming.ack("fanout", "news", p.receipt_handle, client_id="c1")
    with pytest.raises(StaleReceiptHandleError):  # c2's deliveries are not c1's
        broker.consuming.ack("fanout", "news", got["c2"][0].receipt_handle, client_id="c1")
    clock.now += 11_000
    broker.pop.run_revive(clock.now)  # c2 never acked: its copies come back, to c2 only
    assert (
        broker.consuming.receive(
            "fanout", "news", max_count=10, invisible_ms=10_000, client_id="c1"
        )
        == []
    )
    again = broker.consuming.receive(
        "fanout", "news", max_count=10, invisible_ms=10_000, client_id="c2"
    )
    assert sorted((p.message.body, p.delivery_attempt) for p in again) == [(b"n1", 2), (b"n2", 2)]
    assert broker.store.max_offset("%RETRY%fanout", 0) == 0  # redelivered in place
    assert set(broker.consumer_groups.reset_offsets("fanout", "news", "earliest").values()) == {
        0
    }  # all move
    assert (
        len(
            broker.consuming.receive(
                "fanout", "news", max_count=10, invisible_ms=10_000, client_id="c1"
            )
        )
        == 2
    )


def test_pop_receive_long_polls(broker: Broker) -> None:
    answered = threading.Event()
    got: list = []

    def receive() -> None:
        got.extend(
            broker.consuming.receive(
                "workers", "late", max_count=1, invisible_ms=5_000, timeout_ms=20_000
            )
        )
        answered.set()

    broker.topics.for_send("late")
    threading.Thread(target=receive).start()
    broker.sending.send([msg("late", b"arrived")])
    assert answered.wait(10)
    assert [p.message.body for p in got] == [b"arrived"]


def test_offsets_progress_and_reset_by_time(broker: Broker, clock: Clock) -> None:
    for i in range(6):
        clock.now = T0 + i * 1000
        broker.sending.send([msg("orders", f"m{i}".encode())])
    broker.store.wait_dispatched()
    # a new group starts at 0 while the queue's first message is in memory (as RocketMQ
    # answers; tests/broker/test_group_start.py has the end past that window)
    assert broker.consumer_groups.consumer_offset("g", "orders", 0) == 0
    assert broker.groups.get("g") is None  # asking did not create the group
    with pytest.raises(GroupNotFoundError, match="rmq group create g"):
        broker.consumer_groups.reset_offsets("g", "orders", "earliest")
    assert broker.groups.get("g") is None
    broker.consumer_groups.commit_offset("g", "orders", 0, 2)
    assert ("orders", 0, 6, 2, 4) in broker.consumer_groups.group_progress("g")
    assert broker.consumer_groups.reset_offsets("g", "orders", T0 + 3000)[0] == 3
    assert broker.consumer_groups.reset_offsets("g", "orders", "earliest")[0] == 0
    with pytest.raises(InvalidArgumentError):
        broker.consumer_groups.reset_offsets("g", "orders", "yesterday")
    in_range = broker.query_by_time("orders", T0 + 1000, T0 + 3000)
    assert [m.body for m in in_range] == [b"m1", b"m2"]


def test_heartbeat_and_assignment(broker: Broker) -> None:
    broker.sending.send([msg("orders", b"x")])
    for client in ("c1", "c2"):
        broker.consumer_groups.heartbeat("g", client, topics=["orders"], kind="consumer")
    mine = broker.consumer_groups.assignment("g", "orders", "c1")
    theirs = broker.consumer_groups.assignment("g", "orders", "c2")
    assert sorted(q.queue_id for q in mine + theirs) == [0, 1]


def test_everything_survives_a_restart(tmp_path: Path, clock: Clock) -> None:
    config = small_config(tmp_path / "store")
    first = Broker(BrokerConfig(default_queue_nums=2), config, clock_ms=clock)
    first.start()
    first.sending.send([msg("orders", b"kept", KEYS="k1")])
    first.consumer_groups.commit_offset("g", "orders", 0, 1)
    first.sending.send([msg("orders", b"later", DELAY="1")])
    first.stop()
    second = Broker(BrokerConfig(default_queue_nums=2), config, clock_ms=clock)
    second.start()
    try:
        assert second.topics.require("orders").read_queue_nums == 2
        assert second.consumer_groups.consumer_offset("g", "orders", 0) == 1
        assert [m.body for m in second.query_by_key("orders", "k1")] == [b"kept"]
        clock.now += 1_000
        second.schedule.run_once(clock.now)
        assert bodies(second, "orders") == [b"kept", b"later"]
    finally:
        second.stop()


def test_broker_chooses_queues_by_message_group(broker: Broker) -> None:
    sent = broker.sending.send(
        [
            msg("fifo", f"{g}-{i}".encode(), queue_id=-1, __SHARDINGKEY=g)
            for i in range(3)
            for g in ("alice", "bob", "carol")
        ]
    )
    by_group: dict[str, set[int]] = {}
    for result, body in zip(
        sent, [f"{g}-{i}" for i in range(3) for g in ("alice", "bob", "carol")], strict=True
    ):
        by_group.setdefault(body.split("-")[0], set()).add(result.queue_id)
    assert all(len(queues) == 1 for queues in by_group.values())
    spread = broker.sending.send([msg("rr", b"x", queue_id=-1) for _ in range(4)])
    assert sorted(r.queue_id for r in spread) == [0, 0, 1, 1]


def test_queue_count_change_asks_consumers_to_rebalance(broker: Broker) -> None:
    told: list[str] = []
    broker.add_rebalance_listener(told.append)
    broker.sending.send([msg("orders", b"x")])
    broker.consumer_groups.heartbeat("g", "c1", topics=["orders"], kind="consumer")
    assert told == ["g"]  # joined
    broker.update_topic(TopicConfig("orders", read_queue_nums=4, write_queue_nums=4))
    assert told == ["g", "g"]
    assert len(broker.consumer_groups.assignment("g", "orders", "c1")) == 4


def test_delete_topic_forgets_config_queues_and_offsets(broker: Broker) -> None:
    broker.sending.send([msg("doomed", b"a"), msg("doomed", b"b", queue_id=1)])
    broker.store.wait_dispatched()
    broker.consumer_groups.commit_offset("g", "doomed", 0, 1)
    broker.delete_topic("doomed")
    assert broker.topics.get("doomed") is None
    assert broker.consumer_groups.committed_offset("g", "doomed", 0) is None
    assert broker.consumer_groups.queue_bounds("doomed", 1) == (0, 0)
    with pytest.raises(TopicNotFoundError, match="doomed"):
        broker.delete_topic("doomed")


def test_commitlog_offsets_cover_what_was_stored(broker: Broker) -> None:
    low, high, _ = broker.commitlog_offsets()
    broker.sending.send([msg("orders", b"x" * 100)])
    broker.store.commitlog.flush()
    after = broker.commitlog_offsets()
    assert after[0] == low and after[1] > high and after[2] == after[1]
    assert broker.store_config.max_body_bytes > 100


def test_topic_at_names_the_topic_of_a_message_start_only(broker: Broker) -> None:
    broker.sending.send([msg("orders", b"a"), msg("payments", b"b")])
    broker.store.wait_dispatched()
    got = broker.pulling.pull("g", PullRequest("payments", 0, 0, 10))
    offset = got.messages[0].physical_offset
    assert broker.topic_at(offset) == "payments"
    for bogus in (offset + 1, -5, broker.store.commitlog.max_offset, 10**15):
        with pytest.raises(MessageNotFoundError, match=f"no message at commitlog offset {bogus}"):
            broker.topic_at(bogus)
