"""Tests for queue allocation strategies: explicit tables plus hypothesis properties."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.broker.rebalance import (
    STRATEGY_NAMES,
    AllocateStrategy,
    AverageByCircleStrategy,
    AverageStrategy,
    ConfigStrategy,
    ConsistentHashStrategy,
    MessageQueue,
    strategy_by_name,
)
from broker_core.errors import ConfigError, InvalidArgumentError

GROUP = "GID_test"
FAST = settings(max_examples=200, deadline=None)


def mq(queue_id: int, topic: str = "T", broker: str = "b0") -> MessageQueue:
    return MessageQueue(topic, broker, queue_id)


def queues(n: int) -> list[MessageQueue]:
    return [mq(i) for i in range(n)]


def ids(result: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in result]


def allocation(
    strategy: AllocateStrategy, all_queues: list[MessageQueue], cids: list[str]
) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate(GROUP, cid, all_queues, cids) for cid in cids}


def owner_of(shares: dict[str, list[MessageQueue]]) -> dict[MessageQueue, str]:
    return {q: cid for cid, share in shares.items() for q in share}


# --------------------------------------------------------------------------- MessageQueue


def test_message_queue_orders_by_topic_broker_then_id() -> None:
    unsorted = [mq(1, "B", "x"), mq(2, "A", "y"), mq(10, "A", "x"), mq(9, "A", "x")]
    assert sorted(unsorted) == [mq(9, "A", "x"), mq(10, "A", "x"), mq(2, "A", "y"), mq(1, "B", "x")]


@pytest.mark.parametrize("bad", [-1, True, "3", 1.0])
def test_message_queue_rejects_bad_queue_id(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        MessageQueue("T", "b0", bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- tables

AVERAGE_TABLE = [
    (8, ["c1", "c2", "c3"], [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (6, ["c1", "c2", "c3"], [[0, 1], [2, 3], [4, 5]]),
    (2, ["c1", "c2", "c3"], [[0], [1], []]),
    (5, ["c1"], [[0, 1, 2, 3, 4]]),
    (10, ["c1", "c2", "c3", "c4"], [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
    (0, ["c1", "c2"], [[], []]),
]

CIRCLE_TABLE = [
    (8, ["c1", "c2", "c3"], [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (6, ["c1", "c2", "c3"], [[0, 3], [1, 4], [2, 5]]),
    (2, ["c1", "c2", "c3"], [[0], [1], []]),
    (5, ["c1"], [[0, 1, 2, 3, 4]]),
    (10, ["c1", "c2", "c3", "c4"], [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
]


@pytest.mark.parametrize(("n", "cids", "expected"), AVERAGE_TABLE)
def test_average_table(n: int, cids: list[str], expected: list[list[int]]) -> None:
    got = allocation(AverageStrategy(), queues(n), cids)
    assert [ids(got[cid]) for cid in cids] == expected


@pytest.mark.parametrize(("n", "cids", "expected"), CIRCLE_TABLE)
def test_circle_table(n: int, cids: list[str], expected: list[list[int]]) -> None:
    got = allocation(AverageByCircleStrategy(), queues(n), cids)
    assert [ids(got[cid]) for cid in cids] == expected


def test_consistent_hash_fixed_allocation_is_stable_across_releases() -> None:
    """Pins the ring hash: every consumer process must compute the same ring."""
    cids = ["c1", "c2", "c3"]
    got = allocation(ConsistentHashStrategy(), queues(8), cids)
    assert {cid: ids(got[cid]) for cid in cids} == {"c1": [3, 6], "c2": [2, 5, 7], "c3": [0, 1, 4]}
    got3 = allocation(ConsistentHashStrategy(virtual_nodes=3), queues(8), cids)
    assert {cid: ids(got3[cid]) for cid in cids} == {
        "c1": [3, 5, 6],
        "c2": [7],
        "c3": [0, 1, 2, 4],
    }


def test_sorting_uses_topic_and_broker_not_just_queue_id() -> None:
    mixed = [mq(0, "T", "b1"), mq(1, "T", "b0"), mq(0, "T", "b0"), mq(1, "T", "b1")]
    got = allocation(AverageStrategy(), mixed, ["c2", "c1"])
    assert got["c1"] == [mq(0, "T", "b0"), mq(1, "T", "b0")]
    assert got["c2"] == [mq(0, "T", "b1"), mq(1, "T", "b1")]


# --------------------------------------------------------------------------- edge cases

ALL_STRATEGIES: list[AllocateStrategy] = [
    AverageStrategy(),
    AverageByCircleStrategy(),
    ConsistentHashStrategy(),
    ConfigStrategy({"c1": queues(4), "c2": queues(4)}),
]


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=lambda s: s.name)
def test_unknown_cid_gets_nothing(strategy: AllocateStrategy) -> None:
    assert strategy.allocate(GROUP, "ghost", queues(4), ["c1", "c2"]) == []


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=lambda s: s.name)
def test_empty_inputs_give_empty(strategy: AllocateStrategy) -> None:
    assert strategy.allocate(GROUP, "c1", [], ["c1"]) == []
    assert strategy.allocate(GROUP, "c1", queues(4), []) == []


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=lambda s: s.name)
def test_duplicates_are_ignored(strategy: AllocateStrategy) -> None:
    clean = strategy.allocate(GROUP, "c1", queues(4), ["c1", "c2"])
    dup = strategy.allocate(GROUP, "c1", queues(4) * 3, ["c2", "c1", "c2", "c1"])
    assert dup == clean


def test_average_duplicate_cid_does_not_take_a_share() -> None:
    got = AverageStrategy().allocate(GROUP, "c2", queues(4), ["c1", "c1", "c2"])
    assert ids(got) == [2, 3]


def test_inputs_may_be_iterators() -> None:
    got = AverageStrategy().allocate(GROUP, "c1", iter(queues(4)), iter(["c1", "c2"]))
    assert ids(got) == [0, 1]


# --------------------------------------------------------------------------- by_config


def test_config_strategy_returns_configured_queues_sorted() -> None:
    strategy = ConfigStrategy({"c1": [mq(3), mq(1)], "c2": [mq(0)]})
    assert strategy.allocate(GROUP, "c1", queues(4), ["c1", "c2"]) == [mq(1), mq(3)]
    assert strategy.allocate(GROUP, "c2", queues(4), ["c1", "c2"]) == [mq(0)]


def test_config_strategy_unconfigured_cid_and_missing_queue() -> None:
    strategy = ConfigStrategy({"c1": [mq(1), mq(9)]})
    assert strategy.allocate(GROUP, "c2", queues(4), ["c1", "c2"]) == []
    assert strategy.allocate(GROUP, "c1", queues(4), ["c1", "c2"]) == [mq(1)]


def test_config_strategy_rejects_non_queues() -> None:
    with pytest.raises(ConfigError):
        ConfigStrategy({"c1": [1, 2]})  # type: ignore[list-item]


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("averagely", AverageStrategy),
        ("averagely_by_circle", AverageByCircleStrategy),
        ("consistent_hash", ConsistentHashStrategy),
        ("by_config", ConfigStrategy),
    ],
)
def test_strategy_by_name(name: str, cls: type) -> None:
    strategy = strategy_by_name(name)
    assert isinstance(strategy, cls)
    assert strategy.name == name


def test_strategy_by_name_passes_kwargs() -> None:
    strategy = strategy_by_name("consistent_hash", virtual_nodes=3)
    assert isinstance(strategy, ConsistentHashStrategy)
    assert strategy.virtual_nodes == 3
    config = strategy_by_name("by_config", mapping={"c1": [mq(0)]})
    assert config.allocate(GROUP, "c1", queues(2), ["c1"]) == [mq(0)]


def test_strategy_by_name_unknown_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        strategy_by_name("random")
    for name in STRATEGY_NAMES:
        assert name in str(info.value)


def test_strategy_by_name_bad_kwargs() -> None:
    with pytest.raises(ConfigError):
        strategy_by_name("averagely", virtual_nodes=3)


@pytest.mark.parametrize("bad", [0, -1, True, "10", 10_001])
def test_consistent_hash_rejects_bad_virtual_nodes(bad: object) -> None:
    with pytest.raises(ConfigError):
        ConsistentHashStrategy(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

cid_lists = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=20, unique=True)
queue_lists = st.lists(
    st.builds(
        MessageQueue,
        topic=st.sampled_from(["TopicA", "TopicB"]),
        broker_name=st.sampled_from(["broker-a", "broker-b"]),
        queue_id=st.integers(min_value=0, max_value=31),
    ),
    max_size=64,
    unique=True,
)
BALANCED = [AverageStrategy(), AverageByCircleStrategy()]


def _check_exactly_once(
    owners: dict[str, list[MessageQueue]], all_queues: list[MessageQueue]
) -> None:
    counts = Counter(q for share in owners.values() for q in share)
    assert set(counts) == set(all_queues)
    assert all(c == 1 for c in counts.values())


@pytest.mark.parametrize("strategy", BALANCED, ids=lambda s: s.name)
@FAST
@given(all_queues=queue_lists, cids=cid_lists, seed=st.integers(0, 2**32))
def test_balanced_properties(
    strategy: AllocateStrategy, all_queues: list[MessageQueue], cids: list[str], seed: int
) -> None:
    owners = allocation(strategy, all_queues, cids)
    _check_exactly_once(owners, all_queues)
    sizes = [len(share) for share in owners.values()]
    assert max(sizes) - min(sizes) <= 1
    rng = random.Random(seed)
    shuffled_q, shuffled_c = rng.sample(all_queues, len(all_queues)), rng.sample(cids, len(cids))
    assert allocation(strategy, shuffled_q, shuffled_c) == owners


@FAST
@given(all_queues=queue_lists, cids=cid_lists, seed=st.integers(0, 2**32))
def test_consistent_hash_exactly_once_and_deterministic(
    all_queues: list[MessageQueue], cids: list[str], seed: int
) -> None:
    strategy = ConsistentHashStrategy()
    owners = allocation(strategy, all_queues, cids)
    _check_exactly_once(owners, all_queues)
    rng = random.Random(seed)
    shuffled_q, shuffled_c = rng.sample(all_queues, len(all_queues)), rng.sample(cids, len(cids))
    assert allocation(ConsistentHashStrategy(), shuffled_q, shuffled_c) == owners


@FAST
@given(all_queues=queue_lists, cids=cid_lists, newcomer=st.text(min_size=1, max_size=6))
def test_consistent_hash_adding_a_consumer_moves_queues_only_to_it(
    all_queues: list[MessageQueue], cids: list[str], newcomer: str
) -> None:
    strategy = ConsistentHashStrategy(virtual_nodes=5)
    before = owner_of(allocation(strategy, all_queues, cids))
    grown = [*cids, newcomer] if newcomer not in cids else cids
    after = owner_of(allocation(strategy, all_queues, grown))
    assert set(after) == set(all_queues)
    for queue, owner in after.items():
        assert owner in (before[queue], newcomer)
