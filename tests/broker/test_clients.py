"""Tests for the client registry: heartbeats, expiry, listeners and queue assignment."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.broker.clients import ClientRegistry, assign_queues
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.topics import TopicConfig, TopicManager
from broker_core.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidGroupError,
    InvalidTopicError,
)
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message, small_config

EXPIRY_MS = 30_000
GROUP = "GID_orders"
BALANCED = ("averagely", "averagely_by_circle", "consistent_hash")
FAST = settings(max_examples=150, deadline=None)


class FakeClock:
    def __init__(self, now_ms: int = 1_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(clock: FakeClock) -> Iterator[ClientRegistry]:
    reg = ClientRegistry(expiry_ms=EXPIRY_MS, clock_ms=clock, check_interval_ms=5)
    yield reg
    reg.stop()


@pytest.fixture
def events(registry: ClientRegistry) -> list[str]:
    seen: list[str] = []
    registry.add_listener(seen.append)
    return seen


def queues(n: int, topic: str = "orders") -> list[MessageQueue]:
    return [MessageQueue(topic, "broker-a", q) for q in range(n)]


def join(registry: ClientRegistry, cid: str, *topics: str, group: str = GROUP) -> bool:
    return registry.heartbeat(group, cid, topics=topics or ("orders",), kind="consumer")


# --------------------------------------------------------------------------- heartbeats


def test_heartbeat_reports_membership_changes(registry: ClientRegistry, events: list[str]) -> None:
    assert join(registry, "c1") is True
    assert join(registry, "c1") is False
    assert join(registry, "c1", "orders", "audit") is True  # subscription changed
    assert join(registry, "c2") is True
    assert registry.consumers(GROUP) == ["c1", "c2"]
    assert events == [GROUP, GROUP, GROUP]


def test_consumers_are_sorted(registry: ClientRegistry) -> None:
    for cid in ("c3", "c10", "c1"):
        join(registry, cid)
    assert registry.consumers(GROUP) == ["c1", "c10", "c3"]


def test_producers_are_separate_and_do_not_notify(
    registry: ClientRegistry, events: list[str]
) -> None:
    assert registry.heartbeat(GROUP, "p1", topics=["orders"], kind="producer") is True
    assert registry.heartbeat(GROUP, "p1", topics=["orders"], kind="producer") is False
    assert registry.producers(GROUP) == ["p1"]
    assert registry.consumers(GROUP) == []
    assert events == []
    assert join(registry, "p1") is True  # same id as a consumer of the same group name
    assert (registry.producers(GROUP), registry.consumers(GROUP)) == (["p1"], ["p1"])


def test_groups_of_topic(registry: ClientRegistry) -> None:
    join(registry, "c1", "orders", group="GID_b")
    join(registry, "c2", "orders", "audit", group="GID_a")
    join(registry, "c3", "audit", group="GID_c")
    registry.heartbeat("PID_x", "p1", topics=["orders"], kind="producer")
    assert registry.groups_of_topic("orders") == ["GID_a", "GID_b"]
    assert registry.groups_of_topic("audit") == ["GID_a", "GID_c"]
    assert registry.groups_of_topic("none") == []


def test_consumers_filtered_by_topic(registry: ClientRegistry) -> None:
    join(registry, "c1", "orders")
    join(registry, "c2", "audit")
    assert registry.consumers(GROUP, "orders") == ["c1"]
    assert registry.consumers(GROUP) == ["c1", "c2"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"group": "bad group"}, InvalidGroupError),
        ({"client_id": ""}, InvalidArgumentError),
        ({"client_id": 3}, InvalidArgumentError),
        ({"kind": "admin"}, InvalidArgumentError),
        ({"topics": "orders"}, InvalidArgumentError),
        ({"topics": ["bad topic"]}, InvalidTopicError),
    ],
)
def test_heartbeat_validation(
    registry: ClientRegistry, kwargs: dict[str, Any], error: type
) -> None:
    args: dict[str, Any] = {"group": GROUP, "client_id": "c1", "topics": ["orders"]}
    args["kind"] = "consumer"
    args.update(kwargs)
    with pytest.raises(error):
        registry.heartbeat(args.pop("group"), args.pop("client_id"), **args)
    assert registry.consumers(GROUP) == []


def test_unregister(registry: ClientRegistry, events: list[str]) -> None:
    join(registry, "c1")
    join(registry, "c2")
    registry.heartbeat(GROUP, "c1", topics=[], kind="producer")
    events.clear()
    assert registry.unregister(GROUP, "c1") is True
    assert registry.unregister(GROUP, "c1") is False
    assert registry.unregister("GID_other", "c2") is False
    assert (registry.consumers(GROUP), registry.producers(GROUP)) == (["c2"], [])
    assert events == [GROUP]


def test_unregister_producer_only_does_not_notify(
    registry: ClientRegistry, events: list[str]
) -> None:
    registry.heartbeat(GROUP, "p1", topics=[], kind="producer")
    assert registry.unregister(GROUP, "p1") is True
    assert events == []


# --------------------------------------------------------------------------- expiry


@pytest.mark.parametrize(
    ("silent_ms", "expired"),
    [(0, False), (EXPIRY_MS - 1, False), (EXPIRY_MS, False), (EXPIRY_MS + 1, True)],
)
def test_expiry_boundary(
    registry: ClientRegistry, clock: FakeClock, silent_ms: int, expired: bool
) -> None:
    join(registry, "c1")  # uses the injected clock
    result = registry.expire(clock.now_ms + silent_ms)
    assert result == ([(GROUP, "c1")] if expired else [])
    assert registry.consumers(GROUP) == ([] if expired else ["c1"])


def test_heartbeat_refreshes_and_never_goes_back(
    registry: ClientRegistry, clock: FakeClock
) -> None:
    join(registry, "c1")
    clock.now_ms += 20_000
    join(registry, "c1")
    registry.heartbeat(GROUP, "c1", topics=["orders"], kind="consumer", now_ms=0)  # stale
    assert registry.expire(clock.now_ms + EXPIRY_MS) == []
    assert registry.expire(clock.now_ms + EXPIRY_MS + 1) == [(GROUP, "c1")]


def test_expire_notifies_each_consumer_group_once(
    registry: ClientRegistry, clock: FakeClock, events: list[str]
) -> None:
    for cid in ("c1", "c2"):
        join(registry, cid, group="GID_b")
        join(registry, cid, group="GID_a")
    registry.heartbeat("PID_x", "p1", topics=[], kind="producer")
    clock.now_ms += 10_000
    join(registry, "c3", group="GID_a")
    events.clear()
    dropped = registry.expire(clock.now_ms + EXPIRY_MS - 5_000)
    assert dropped == [
        ("GID_a", "c1"),
        ("GID_a", "c2"),
        ("GID_b", "c1"),
        ("GID_b", "c2"),
        ("PID_x", "p1"),
    ]
    assert events == ["GID_a", "GID_b"]
    assert registry.consumers("GID_a") == ["c3"]
    assert registry.consumers("GID_b") == [] and registry.groups_of_topic("orders") == ["GID_a"]
    assert registry.run_once(clock.now_ms + 10 * EXPIRY_MS) == [("GID_a", "c3")]


def test_listener_errors_do_not_stop_other_listeners(
    registry: ClientRegistry, events: list[str]
) -> None:
    def broken(group: str) -> None:
        raise RuntimeError(f"listener failed for {group}")

    later: list[str] = []
    registry.add_listener(broken)
    registry.add_listener(later.append)
    with pytest.raises(RuntimeError, match="listener failed"):
        join(registry, "c1")
    assert registry.consumers(GROUP) == ["c1"]  # the change happened regardless
    assert events == [GROUP] and later == [GROUP]


def test_listener_may_call_back_into_registry(registry: ClientRegistry) -> None:
    seen: list[list[str]] = []
    registry.add_listener(lambda group: seen.append(registry.consumers(group)))
    join(registry, "c1")
    join(registry, "c2")
    registry.unregister(GROUP, "c1")
    assert seen == [["c1"], ["c1", "c2"], ["c2"]]


def test_expiry_thread(registry: ClientRegistry, clock: FakeClock) -> None:
    expired = threading.Event()
    registry.add_listener(lambda group: expired.set())
    join(registry, "c1")
    expired.clear()
    registry.start()
    registry.start()  # idempotent
    clock.now_ms += EXPIRY_MS + 1
    assert expired.wait(5.0)
    assert registry.consumers(GROUP) == []
    registry.stop()
    registry.stop()  # idempotent
    join(registry, "c2")
    clock.now_ms += 10 * EXPIRY_MS
    assert registry.consumers(GROUP) == ["c2"]  # nothing expires once stopped


def test_default_clock_is_monotonic_ms() -> None:
    registry = ClientRegistry()
    registry.heartbeat(GROUP, "c1", topics=[], kind="consumer")
    assert registry.expire(0) == []


# --------------------------------------------------------------------------- assignment


@pytest.mark.parametrize(
    ("cid", "members", "broadcast", "expected"),
    [
        ("c1", ["c1", "c2"], False, [0, 1, 2]),
        ("c2", ["c2", "c1"], False, [3, 4]),
        ("c3", ["c1", "c2"], False, []),
        ("c1", ["c1", "c2"], True, [0, 1, 2, 3, 4]),
        ("c2", ["c1", "c2"], True, [0, 1, 2, 3, 4]),
        ("c3", ["c1", "c2"], True, []),
        ("c1", [], False, []),
        ("c1", ["c1"], False, [0, 1, 2, 3, 4]),
    ],
)
def test_assign_queues_table(
    cid: str, members: list[str], broadcast: bool, expected: list[int]
) -> None:
    mine = assign_queues(GROUP, cid, queues(5), members, "averagely", broadcast=broadcast)
    assert [q.queue_id for q in mine] == expected


def test_assign_queues_deduplicates_broadcast() -> None:
    doubled = queues(3) + queues(3)[::-1]
    assert assign_queues(GROUP, "c1", doubled, ["c1"], "averagely", broadcast=True) == queues(3)


def test_assign_queues_rejects_unknown_strategy() -> None:
    with pytest.raises(ConfigError, match="unknown allocation strategy"):
        assign_queues(GROUP, "c1", queues(2), ["c1"], "random", broadcast=False)


@pytest.mark.parametrize("strategy", BALANCED)
def test_two_clients_cover_every_queue_once(registry: ClientRegistry, strategy: str) -> None:
    join(registry, "c1")
    join(registry, "c2")
    shares = [registry.assignment(GROUP, "orders", c, queues(8), strategy) for c in ("c1", "c2")]
    assert Counter(q for share in shares for q in share) == Counter(queues(8))


@FAST
@given(
    n_queues=st.integers(0, 40),
    cids=st.sets(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=7),
    strategy=st.sampled_from(BALANCED),
)
def test_members_cover_every_queue_once(n_queues: int, cids: set[str], strategy: str) -> None:
    registry = ClientRegistry(clock_ms=lambda: 0)
    for cid in cids:
        join(registry, cid)
    shares = [registry.assignment(GROUP, "orders", c, queues(n_queues), strategy) for c in cids]
    assert Counter(q for share in shares for q in share) == Counter(queues(n_queues))


def test_broadcast_gives_everyone_everything(registry: ClientRegistry) -> None:
    for cid in ("c1", "c2", "c3"):
        join(registry, cid)
    for cid in ("c1", "c2", "c3"):
        mine = registry.assignment(GROUP, "orders", cid, queues(4), "averagely", broadcast=True)
        assert mine == queues(4)
    assert registry.assignment(GROUP, "orders", "c9", queues(4), "averagely", broadcast=True) == []


def test_assignment_counts_only_members_subscribing_the_topic(registry: ClientRegistry) -> None:
    join(registry, "c1", "orders")
    join(registry, "c2", "audit")
    assert registry.assignment(GROUP, "orders", "c1", queues(4), "averagely") == queues(4)
    assert registry.assignment(GROUP, "orders", "c2", queues(4), "averagely") == []


def test_assignment_follows_membership(registry: ClientRegistry, clock: FakeClock) -> None:
    join(registry, "c1")
    join(registry, "c2")
    assert len(registry.assignment(GROUP, "orders", "c1", queues(6), "averagely")) == 3
    clock.now_ms += 20_000
    join(registry, "c1")
    registry.expire(clock.now_ms + 15_000)  # c2 silent for 35 s, c1 for 15 s
    assert registry.assignment(GROUP, "orders", "c1", queues(6), "averagely") == queues(6)


# --------------------------------------------------------------------------- with a store


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[[], MessageStore]]:
    """Open a MessageStore on tmp_path/store (again after a close); all closed at teardown."""
    opened: list[MessageStore] = []

    def _open() -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store"))
        store.open()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


class Broker:
    """Just enough of a broker to run a consumer group over the real store."""

    def __init__(self, config_dir: Path, store: MessageStore, clock: FakeClock) -> None:
        self.store = store
        self.topics = TopicManager(config_dir / "topics.json")
        self.offsets = ConsumerOffsetManager(config_dir / "consumerOffset.json")
        self.registry = ClientRegistry(expiry_ms=EXPIRY_MS, clock_ms=clock)
        self.sent = 0

    def send(self, count: int) -> None:
        config = self.topics.for_send("orders")
        batch = []
        for i in range(self.sent, self.sent + count):
            qid = self.topics.write_queue_for(config.name, None, i)
            batch.append(make_message(i, topic="orders", queue_id=qid))
        self.store.put_messages(batch)
        self.sent += count
        self.store.wait_dispatched()

    def poll(self, cid: str, max_per_queue: int) -> list[int]:
        """Consume up to ``max_per_queue`` from each queue assigned to ``cid`` and commit."""
        all_queues = self.topics.for_read("orders").read_queues("broker-a")
        got: list[int] = []
        for queue in self.registry.assignment(GROUP, "orders", cid, all_queues, "averagely"):
            start = self.offsets.query(GROUP, "orders", queue.queue_id) or 0
            result = self.store.get_messages(
                QueueRead("orders", queue.queue_id, start, max_per_queue)
            )
            got += [int(m.properties["n"]) for m in result.messages]
            self.offsets.commit(GROUP, "orders", queue.queue_id, result.next_offset, durable=True)
        return got


def test_group_consumes_everything_once_across_expiry_and_restart(
    tmp_path: Path, open_store: Callable[[], MessageStore], clock: FakeClock
) -> None:
    broker = Broker(tmp_path / "config", open_store(), clock)
    broker.topics.create_or_update(TopicConfig("orders", 6, 6))
    changes: list[str] = []
    broker.registry.add_listener(changes.append)
    broker.send(60)
    join(broker.registry, "c1")
    join(broker.registry, "c2")
    consumed = broker.poll("c1", 4) + broker.poll("c2", 4)

    clock.now_ms += EXPIRY_MS + 1  # c2 dies; c1 keeps heartbeating
    join(broker.registry, "c1")
    assert broker.registry.expire(clock.now_ms) == [(GROUP, "c2")]
    assert changes[-1] == GROUP
    consumed += broker.poll("c1", 3)
    broker.store.close()

    restarted = Broker(tmp_path / "config", open_store(), clock)  # empty registry
    restarted.sent = broker.sent
    assert restarted.registry.consumers(GROUP) == []
    join(restarted.registry, "c1")
    join(restarted.registry, "c3")
    restarted.send(30)
    for _ in range(20):
        batch = restarted.poll("c1", 5) + restarted.poll("c3", 5)
        if not batch:
            break
        consumed += batch
    assert sorted(consumed) == list(range(90))  # nothing lost, nothing twice
