"""Lite topic names, subscriptions and the priority/lite receive plans (pure policy)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.lite import (
    COMPLETE_ADD,
    COMPLETE_REMOVE,
    PARTIAL_ADD,
    PARTIAL_REMOVE,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    LiteSubscriptions,
    lmq_topic,
    priority_queue,
    receive_plan,
    split_lmq,
    validate_lite_topic,
)
from broker_core.broker.topics import TopicConfig
from broker_core.config import BrokerConfig
from broker_core.errors import InvalidArgumentError, InvalidLiteTopicError, LiteQuotaExceededError
from broker_core.message import Message
from tests.store.conftest import small_config

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
def test_priority_picks_the_queue_capped_at_the_last(
    priority: int, queues: int, queue: int
) -> None:
    assert priority_queue(priority, queues) == queue


def test_receive_plans() -> None:
    assert receive_plan("PRIORITY", "t", [0, 1, 2, 3], group_fifo=False, lite_topics=[]) == (
        [3, 2, 1, 0],
        {"retry": "last"},
    )
    assert receive_plan("PRIORITY", "t", [0, 1], group_fifo=True, lite_topics=[]) == ([0, 1], {})
    ids, how = receive_plan("LITE", "p", [0, 1], group_fifo=False, lite_topics=["a", "b"])
    assert ids == [] and how == {"retry": "none", "fifo": True, "topics": ["%LMQ%p|a", "%LMQ%p|b"]}
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
        "z"
    ]
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


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(BrokerConfig(default_queue_nums=2), small_config(tmp_path / "store"))
    b.start()
    b.topics.create_or_update(TopicConfig("lp", 2, 2, message_type="LITE"))
    b.topics.create_or_update(TopicConfig("pp", 4, 4, message_type="PRIORITY"))
    yield b
    b.stop()


def _lite(body: bytes, lite: str) -> Message:
    return Message("lp", body, queue_id=-1, properties={PROPERTY_LITE_TOPIC: lite})


def test_lite_messages_live_in_their_own_topic_and_ack_with_or_without_the_name(broker) -> None:
    [sent] = broker.sending.send([_lite(b"x", "la")])
    assert (sent.topic, sent.queue_id, sent.queue_offset) == ("%LMQ%lp|la", 0, 0)
    broker.sending.send([_lite(b"y", "la"), _lite(b"z", "lb")])
    broker.consuming.sync_lite_subscription("g", "c1", "lp", PARTIAL_ADD, ["la", "lb"])
    got = broker.consuming.receive("g", "lp", max_count=8, invisible_ms=60_000, client_id="c1")
    assert [p.message.body for p in got] == [b"x", b"z"]  # y waits behind x (in order)
    broker.consuming.ack("g", "lp", got[0].receipt_handle, client_id="c1", lite_topic="la")
    broker.consuming.ack(
        "g", "lp", got[1].receipt_handle, client_id="c1"
    )  # no lite_topic: from handle
    again = broker.consuming.receive("g", "lp", max_count=8, invisible_ms=60_000, client_id="c1")
    assert [p.message.body for p in again] == [b"y"]
    assert (
        broker.consuming.receive("g", "lp", max_count=8, invisible_ms=60_000, client_id="c2") == []
    )


def test_priority_messages_go_to_their_queue_and_come_out_highest_first(broker) -> None:
    msgs = [
        Message("pp", b"p%d" % p, queue_id=-1, properties={PROPERTY_PRIORITY: str(p)})
        for p in (0, 5, 1, 2)
    ]
    assert [r.queue_id for r in broker.sending.send(msgs)] == [0, 3, 1, 2]
    got = broker.consuming.receive("g", "pp", max_count=8, invisible_ms=60_000)
    assert [p.message.body for p in got] == [b"p5", b"p2", b"p1", b"p0"]
    with pytest.raises(InvalidArgumentError, match="priority"):
        broker.sending.send(
            [Message("pp", b"bad", queue_id=-1, properties={PROPERTY_PRIORITY: "-1"})]
        )


def test_lite_topics_stay_out_of_the_topic_table_and_survive_a_restart(tmp_path) -> None:
    config = small_config(tmp_path / "store")
    first = Broker(BrokerConfig(), config)
    first.start()
    first.topics.create_or_update(TopicConfig("lp", 2, 2, message_type="LITE"))
    first.sending.send([_lite(b"a", "la"), _lite(b"b", "la")])
    first.consuming.sync_lite_subscription("g", "c", "lp", PARTIAL_ADD, ["la"])
    [got] = first.consuming.receive("g", "lp", max_count=1, invisible_ms=60_000, client_id="c")
    first.consuming.ack("g", "lp", got.receipt_handle, client_id="c", lite_topic="la")
    assert first.topics.get("%LMQ%lp|la") is None
    first.stop()
    second = Broker(BrokerConfig(), config)
    second.start()
    try:
        second.consuming.sync_lite_subscription("g", "c", "lp", COMPLETE_ADD, ["la"])
        again = second.consuming.receive("g", "lp", max_count=8, invisible_ms=60_000, client_id="c")
        assert [p.message.body for p in again] == [b"b"]  # a was acked before the restart
    finally:
        second.stop()
