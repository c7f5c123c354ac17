"""Lite topic names, subscriptions and the priority/lite receive plans (pure policy)."""

from __future__ import annotations

import pytest

from broker_core.broker.lite import (
    COMPLETE_ADD,
    COMPLETE_REMOVE,
    PARTIAL_ADD,
    PARTIAL_REMOVE,
    LiteSubscriptions,
    lmq_topic,
    priority_queue,
    receive_plan,
    split_lmq,
    validate_lite_topic,
)
from broker_core.broker.topics import TopicConfig
from broker_core.errors import InvalidArgumentError, InvalidLiteTopicError, LiteQuotaExceededError

LITE = TopicConfig("parent", message_type="LITE")


def test_lmq_names_round_trip() -> None:
    name = lmq_topic("parent|with-bar", "order-42")
    assert name == "%LMQ%parent|with-bar|order-42"
    assert split_lmq(name) == ("parent|with-bar", "order-42")
    assert split_lmq("parent") is None and split_lmq("%LMQ%nobar") is None


@pytest.mark.parametrize("bad", ["", " ", "a b", "a|b", "%x", "é", "x" * 65])
def test_bad_lite_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidLiteTopicError):
        validate_lite_topic(bad)


def test_a_lite_name_too_long_for_its_parent_is_refused() -> None:
    with pytest.raises(InvalidLiteTopicError, match="queue name"):
        lmq_topic("p" * 100, "x" * 30)


@pytest.mark.parametrize(("priority", "queues", "queue"), [(0, 4, 0), (3, 4, 3), (9, 4, 3)])
def test_priority_picks_the_queue_capped_at_the_last(priority: int, queues: int,
                                                      queue: int) -> None:  # fmt: skip
    assert priority_queue(priority, queues) == queue


def test_receive_plans() -> None:
    assert receive_plan("PRIORITY", "t", [0, 1, 2, 3], group_fifo=False, lite_topics=[]) == (
        [3, 2, 1, 0], {"retry": "last"})
    assert receive_plan("PRIORITY", "t", [0, 1], group_fifo=True, lite_topics=[]) == ([0, 1], {})
    ids, how = receive_plan("LITE", "p", [0, 1], group_fifo=False, lite_topics=["a", "b"])
    assert ids == [] and how == {"retry": "none", "fifo": True,
                                 "topics": ["%LMQ%p|a", "%LMQ%p|b"]}  # fmt: skip
    assert receive_plan("NORMAL", "t", [1, 0], group_fifo=False, lite_topics=[]) == ([1, 0], {})


def test_subscription_actions_per_client() -> None:
    subs = LiteSubscriptions(quota=3)
    assert subs.sync("g", "c1", LITE, PARTIAL_ADD, ["a", "b"]) == {"a", "b"}
    assert subs.sync("g", "c2", LITE, PARTIAL_ADD, ["z"]) == {"z"}
    assert subs.sync("g", "c1", LITE, PARTIAL_REMOVE, ["a", "never"]) == {"b"}
    assert subs.sync("g", "c1", LITE, COMPLETE_ADD, ["x", "y"]) == {"x", "y"}
    assert subs.topics_of("g", "c1", "parent") == ["x", "y"]
    assert subs.topics_of("g", "c1", "other-parent") == []
    assert subs.sync("g", "c1", LITE, COMPLETE_REMOVE, []) == frozenset()
    assert subs.topics_of("g", "c1", "parent") == [] and subs.topics_of("g", "c2", "parent") == [
        "z"]
    subs.forget_client("c2")
    assert subs.topics_of("g", "c2", "parent") == []


def test_quota_and_bad_requests_change_nothing() -> None:
    subs = LiteSubscriptions(quota=2)
    subs.sync("g", "c", LITE, PARTIAL_ADD, ["a", "b"])
    with pytest.raises(LiteQuotaExceededError):
        subs.sync("g", "c", LITE, PARTIAL_ADD, ["c"])
    with pytest.raises(InvalidLiteTopicError):
        subs.sync("g", "c", LITE, PARTIAL_ADD, ["bad name"])
    with pytest.raises(InvalidLiteTopicError, match="action"):
        subs.sync("g", "c", LITE, 7, ["a"])
    with pytest.raises(InvalidArgumentError, match="LITE topic"):
        subs.sync("g", "c", TopicConfig("plain"), PARTIAL_ADD, ["a"])
    with pytest.raises(InvalidArgumentError, match="client"):
        subs.sync("g", "", LITE, PARTIAL_ADD, ["a"])
    assert subs.topics_of("g", "c", "parent") == ["a", "b"]
