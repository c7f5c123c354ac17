"""Tests for the pure parts of topics: permissions, TopicConfig, queue selection, auto-creatable
names and system topic configs."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from broker_core.broker.order import queue_for_message_group
from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.system_topics import (
    REVIVE_TOPIC,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from broker_core.broker.topics import (
    MESSAGE_TYPES,
    Perm,
    TopicConfig,
    auto_creatable,
    select_write_queue,
    system_topic_configs,
)
from broker_core.errors import ConfigError, InvalidArgumentError, InvalidTopicError


@pytest.mark.parametrize(
    ("perm", "readable", "writeable", "text"),
    [
        (Perm.WRITE, False, True, "-W-"),
        (Perm.READ, True, False, "R--"),
        (Perm.READ_WRITE, True, True, "RW-"),
    ],
)
def test_perm_bits(perm: int, readable: bool, writeable: bool, text: str) -> None:
    assert (Perm.readable(perm), Perm.writeable(perm), Perm.describe(perm)) == (
        readable,
        writeable,
        text,
    )


def test_perm_values_match_rocketmq() -> None:
    assert (Perm.READ, Perm.WRITE, Perm.READ_WRITE) == (4, 2, 6)


# --------------------------------------------------------------------------- TopicConfig


def test_topic_config_defaults() -> None:
    config = TopicConfig("orders")
    assert (config.read_queue_nums, config.write_queue_nums) == (8, 8)
    assert (config.perm, config.message_type, dict(config.attributes)) == (6, "MIXED", {})


@pytest.mark.parametrize(
    ("overrides", "error", "fragment"),
    [
        ({"name": ""}, InvalidTopicError, "empty"),
        ({"name": "bad topic"}, InvalidTopicError, "characters"),
        ({"name": "x" * 128}, InvalidTopicError, "longer"),
        ({"name": 7}, InvalidTopicError, "string"),
        ({"read_queue_nums": 0}, ConfigError, "read_queue_nums must be in 1..1024"),
        ({"read_queue_nums": 1025}, ConfigError, "read_queue_nums must be in 1..1024"),
        ({"write_queue_nums": 0}, ConfigError, "write_queue_nums must be in 1..1024"),
        ({"write_queue_nums": True}, ConfigError, "write_queue_nums must be an int"),
        ({"write_queue_nums": 2.0}, ConfigError, "write_queue_nums must be an int"),
        ({"perm": 0}, ConfigError, "perm must be 2 (write), 4 (read) or 6"),
        ({"perm": 7}, ConfigError, "perm must be"),
        ({"perm": 1}, ConfigError, "perm must be"),
        ({"perm": True}, ConfigError, "perm must be"),
        ({"message_type": "normal"}, ConfigError, "message_type must be one of"),
        ({"attributes": {"k": 1}}, ConfigError, "attributes must map str to str"),
        ({"attributes": ["k"]}, ConfigError, "attributes must map str to str"),
    ],
)
def test_topic_config_validation(
    overrides: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    values: dict[str, Any] = {"name": "orders", **overrides}
    with pytest.raises(error, match=re.escape(fragment)):
        TopicConfig(**values)


def test_config_errors_are_invalid_argument_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        TopicConfig("orders", perm=3)


def test_queue_bounds_are_inclusive() -> None:
    assert TopicConfig("t", 1, 1024).write_queue_nums == 1024


def test_attributes_are_copied() -> None:
    attrs = {"retention": "3d"}
    config = TopicConfig("t", attributes=attrs)
    attrs["retention"] = "1d"
    assert config.attributes == {"retention": "3d"}
    assert hash(config) == hash(TopicConfig("t", attributes={"other": "x"}))


@pytest.mark.parametrize(
    "config",
    [
        TopicConfig("orders"),
        TopicConfig("fifo", 16, 4, Perm.READ, "FIFO", {"a": "b"}),
        TopicConfig("%RETRY%g", 1, 1, Perm.WRITE, "NORMAL"),
    ],
)
def test_topic_config_dict_round_trip(config: TopicConfig) -> None:
    assert TopicConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"name": "t", "queues": 3}, "unknown keys"),
        ({"perm": 6}, "missing 'name'"),
        (["t"], "must be an object"),
    ],
)
def test_topic_config_from_dict_rejects(data: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        TopicConfig.from_dict(data)


@pytest.mark.parametrize(
    ("topic_type", "message_type", "accepted"),
    [
        ("MIXED", "NORMAL", True),
        ("MIXED", "TRANSACTION", True),
        ("NORMAL", "NORMAL", True),
        ("NORMAL", "FIFO", False),
        ("FIFO", "FIFO", True),
        ("DELAY", "NORMAL", False),
        ("TRANSACTION", "TRANSACTION", True),
        ("MIXED", "PRIORITY", True),
        ("MIXED", "LITE", False),  # lite topics live only under a LITE parent
        ("LITE", "LITE", True),
        ("PRIORITY", "NORMAL", False),
    ],
)
def test_accepts_message_type(topic_type: str, message_type: str, accepted: bool) -> None:
    assert TopicConfig("t", message_type=topic_type).accepts(message_type) is accepted


def test_message_types_are_rocketmq_5_ones() -> None:
    assert set(MESSAGE_TYPES) == {
        "NORMAL",
        "FIFO",
        "DELAY",
        "TRANSACTION",
        "PRIORITY",
        "LITE",
        "MIXED",
    }


def test_read_queues_follow_read_count() -> None:
    assert TopicConfig("t", read_queue_nums=3, write_queue_nums=1).read_queues("b") == [
        MessageQueue("t", "b", 0),
        MessageQueue("t", "b", 1),
        MessageQueue("t", "b", 2),
    ]


# --------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(
    ("write_queue_nums", "counter", "expected"),
    [(8, 0, 0), (8, 7, 7), (8, 8, 0), (8, 21, 5), (1, 99, 0), (3, 10**12, 10**12 % 3)],
)
def test_round_robin_selection(write_queue_nums: int, counter: int, expected: int) -> None:
    assert select_write_queue(write_queue_nums, None, counter) == expected


@pytest.mark.parametrize("group", ["order-1", "order-2", "user:42", "é"])
@pytest.mark.parametrize("write_queue_nums", [1, 4, 16])
def test_message_group_selection_ignores_counter(group: str, write_queue_nums: int) -> None:
    chosen = {select_write_queue(write_queue_nums, group, counter) for counter in range(20)}
    assert chosen == {queue_for_message_group(group, write_queue_nums)}


def test_round_robin_spreads_evenly() -> None:
    counts = Counter(select_write_queue(6, None, counter) for counter in range(600))
    assert counts == dict.fromkeys(range(6), 100)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((8, None, -1), InvalidArgumentError),
        ((8, None, True), InvalidArgumentError),
        ((8, None, 1.0), InvalidArgumentError),
        ((0, None, 1), InvalidArgumentError),
        ((0, "g", 1), InvalidArgumentError),
        ((8, "", 1), InvalidArgumentError),
    ],
)
def test_select_write_queue_rejects(args: tuple[Any, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        select_write_queue(*args)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders", True),
        ("RETRYING", True),
        ("%RETRY%GID_a", False),
        ("%DLQ%GID_a", False),
        (SCHEDULE_TOPIC, False),
        (TRANS_HALF_TOPIC, False),
        ("rmq_sys_anything", False),
        ("RMQ_SYS_ANYTHING", False),
    ],
)
def test_auto_creatable(name: str, expected: bool) -> None:
    assert auto_creatable(name) is expected


def test_system_topic_configs() -> None:
    configs = {c.name: c for c in system_topic_configs()}
    assert set(configs) == set(SYSTEM_TOPICS)
    assert configs[SCHEDULE_TOPIC].write_queue_nums == 18
    assert configs[SCHEDULE_TOPIC].read_queue_nums == 18
    for name in (TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, REVIVE_TOPIC):
        assert (configs[name].read_queue_nums, configs[name].write_queue_nums) == (1, 1)
    assert {c.perm for c in configs.values()} == {Perm.READ_WRITE}
