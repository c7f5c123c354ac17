"""Tests for consumer group configs and the persisted group table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.groups import (
    CONSUME_FROM,
    GROUP_STRATEGIES,
    GroupConfig,
    GroupManager,
    base_group,
    broadcast_member,
)
from broker_core.broker.rebalance import (
    STRATEGY_NAMES,
    AverageByCircleStrategy,
    AverageStrategy,
    ConsistentHashStrategy,
)
from broker_core.broker.retry import RetryPolicy
from broker_core.errors import (
    ConfigError,
    CorruptionError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidGroupError,
)
from broker_core.store.atomic_file import write_json_atomic


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "subscriptionGroup.json"


@pytest.fixture
def groups(path: Path) -> GroupManager:
    return GroupManager(path)


# --------------------------------------------------------------------------- GroupConfig


def test_defaults() -> None:
    config = GroupConfig("GID_a")
    assert config.retry_policy == RetryPolicy()
    assert config.retry_policy.max_retries == 16
    assert (config.consume_from_where, config.consume_timestamp_ms) == ("last_offset", 0)
    assert (config.fifo, config.broadcast, config.consume_enable) == (False, False, True)
    assert config.rebalance_strategy == "averagely"


CONFIGS = [
    GroupConfig("GID_a"),
    GroupConfig("GID_fifo", fifo=True, retry_policy=RetryPolicy.custom("1s,5s", max_retries=3)),
    GroupConfig("GID_b", broadcast=True, consume_from_where="first_offset"),
    GroupConfig("GID_ts", consume_from_where="timestamp", consume_timestamp_ms=1_700_000_000_000),
    GroupConfig("GID_off", consume_enable=False, retry_policy=RetryPolicy(max_retries=0)),
    GroupConfig("GID_exp", retry_policy=RetryPolicy.exponential(100, 2.0, 60_000, 5)),
    *(GroupConfig(f"GID_{name}", rebalance_strategy=name) for name in GROUP_STRATEGIES),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_dict_round_trip(config: GroupConfig) -> None:
    assert GroupConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_from_dict_fills_defaults() -> None:
    assert GroupConfig.from_dict({"name": "GID_a"}) == GroupConfig("GID_a")
    assert GroupConfig.from_dict({"name": "GID_a", "retry_policy": {}}) == GroupConfig("GID_a")


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"consume_from_where": "latest"}, "consume_from_where must be one of"),
        ({"consume_from_where": None}, "consume_from_where must be one of"),
        ({"consume_timestamp_ms": -1}, "consume_timestamp_ms must be an int >= 0"),
        ({"consume_timestamp_ms": 1.5}, "consume_timestamp_ms must be an int >= 0"),
        ({"consume_timestamp_ms": True}, "consume_timestamp_ms must be an int >= 0"),
        ({"fifo": 1}, "fifo must be true or false"),
        ({"broadcast": "yes"}, "broadcast must be true or false"),
        ({"consume_enable": None}, "consume_enable must be true or false"),
        ({"rebalance_strategy": "random"}, "unknown rebalance_strategy 'random'"),
        ({"retry_policy": {"max_retries": 3}}, "retry_policy must be a RetryPolicy"),
    ],
)
def test_validation(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        GroupConfig("GID_a", **overrides)


@pytest.mark.parametrize("name", ["", "has space", "x" * 256, 5])
def test_bad_names(name: Any) -> None:
    with pytest.raises(InvalidGroupError):
        GroupConfig(name)


def test_consume_from_choices() -> None:
    assert CONSUME_FROM == ("last_offset", "first_offset", "timestamp")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"name": "GID_a", "orderly": True}, r"unknown keys \['orderly'\]"),
        ({"fifo": True}, "missing 'name'"),
        ("GID_a", "must be an object"),
        ({"name": "GID_a", "retry_policy": {"max_retries": 3, "x": 1}}, "unknown keys"),
        ({"name": "GID_a", "retry_policy": {"max_retries": -1}}, "max_retries"),
        ({"name": "GID_a", "retry_policy": {"backoff": {"type": "linear"}}}, "backoff type"),
        ({"name": "GID_a", "retry_policy": 3}, "retry policy must be an object"),
        ({"name": "GID_a", "fifo": "true"}, "fifo must be true or false"),
        ({"name": "GID_a", "rebalance_strategy": "AVERAGELY"}, "unknown rebalance_strategy"),
    ],
)
def test_from_dict_rejects(data: Any, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        GroupConfig.from_dict(data)


def test_from_dict_bad_name_is_invalid_group() -> None:
    with pytest.raises(InvalidGroupError):
        GroupConfig.from_dict({"name": "bad name"})


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("averagely", AverageStrategy),
        ("averagely_by_circle", AverageByCircleStrategy),
        ("consistent_hash", ConsistentHashStrategy),
    ],
)
def test_strategy_instance(name: str, cls: type) -> None:
    assert isinstance(GroupConfig("GID_a", rebalance_strategy=name).strategy(), cls)


# --------------------------------------------------------------------------- GroupManager


def test_persistence_round_trip(groups: GroupManager, path: Path) -> None:
    for config in CONFIGS:
        groups.create_or_update(config)
    groups.get_or_create("GID_auto")
    reopened = GroupManager(path)
    assert reopened.list() == groups.list()
    assert reopened.load_problem == ""
    expected = sorted(c.name for c in [*CONFIGS, GroupConfig("GID_auto")])
    assert [c.name for c in reopened.list()] == expected


def test_update_replaces(groups: GroupManager, path: Path) -> None:
    groups.create_or_update(GroupConfig("GID_a"))
    groups.create_or_update(GroupConfig("GID_a", broadcast=True))
    assert GroupManager(path).require("GID_a").broadcast is True


def test_identical_update_does_not_rewrite(groups: GroupManager, path: Path) -> None:
    groups.create_or_update(GroupConfig("GID_a"))
    groups.create_or_update(GroupConfig("GID_a"))
    groups.get_or_create("GID_a")
    assert not path.with_name(path.name + ".bak").exists()


def test_corrupt_file_loads_backup(groups: GroupManager, path: Path) -> None:
    groups.create_or_update(GroupConfig("GID_first"))
    groups.create_or_update(GroupConfig("GID_second"))
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    reopened = GroupManager(path)
    assert [c.name for c in reopened.list()] == ["GID_first"]
    assert "subscriptionGroup.json" in reopened.load_problem


def test_unreadable_file_and_backup_raise(groups: GroupManager, path: Path) -> None:
    groups.create_or_update(GroupConfig("GID_first"))
    groups.create_or_update(GroupConfig("GID_second"))
    path.write_bytes(b"{")
    path.with_name(path.name + ".bak").write_bytes(b"")
    with pytest.raises(CorruptionError):
        GroupManager(path)


@pytest.mark.parametrize(
    "data", [{"topics": []}, {"groups": [{"name": "GID_a", "fifo": 2}]}, {"groups": 3}]
)
def test_malformed_but_checksummed_file_raises(path: Path, data: Any) -> None:
    write_json_atomic(path, data)
    with pytest.raises(ConfigError):
        GroupManager(path)


def test_failed_write_changes_nothing(groups: GroupManager, path: Path) -> None:
    groups.create_or_update(GroupConfig("GID_kept"))
    shutil.rmtree(path.parent)
    path.parent.write_bytes(b"")
    with pytest.raises(OSError):
        groups.create_or_update(GroupConfig("GID_lost"))
    with pytest.raises(OSError):
        groups.get_or_create("GID_auto")
    with pytest.raises(OSError):
        groups.delete("GID_kept")
    assert [c.name for c in groups.list()] == ["GID_kept"]


def test_require_and_get(groups: GroupManager) -> None:
    assert groups.get("GID_x") is None
    with pytest.raises(GroupNotFoundError, match="GID_x"):
        groups.require("GID_x")
    groups.create_or_update(GroupConfig("GID_x", fifo=True))
    assert groups.require("GID_x").fifo is True


@pytest.mark.parametrize("auto_create", [True, False])
def test_get_or_create(path: Path, auto_create: bool) -> None:
    groups = GroupManager(path, auto_create=auto_create)
    if auto_create:
        made = GroupConfig("GID_new", auto_created=True)  # made on first use: marked so
        assert groups.get_or_create("GID_new") == made
        assert GroupManager(path).require("GID_new") == made
    else:
        with pytest.raises(GroupNotFoundError, match="auto-create is off"):
            groups.get_or_create("GID_new")
        assert groups.list() == []


def test_get_or_create_returns_existing_without_defaults(path: Path) -> None:
    groups = GroupManager(path, auto_create=False)
    groups.create_or_update(GroupConfig("GID_b", broadcast=True))
    assert groups.get_or_create("GID_b").broadcast is True


def test_get_or_create_rejects_bad_name(groups: GroupManager) -> None:
    with pytest.raises(InvalidGroupError):
        groups.get_or_create("bad name")


def test_create_or_update_rejects_non_config(groups: GroupManager) -> None:
    with pytest.raises(InvalidArgumentError):
        groups.create_or_update("GID_a")  # type: ignore[arg-type]


def test_delete(groups: GroupManager, path: Path) -> None:
    groups.create_or_update(GroupConfig("GID_a"))
    groups.create_or_update(GroupConfig("GID_b"))
    assert groups.delete("GID_a") is True
    assert groups.delete("GID_a") is False
    assert [c.name for c in GroupManager(path).list()] == ["GID_b"]


def test_broadcast_member_names_are_reserved_and_fit() -> None:
    member = broadcast_member("GID_b", "host@1@abc")
    assert base_group(member) == "GID_b" and member != broadcast_member("GID_b", "host@1@abd")
    with pytest.raises(InvalidGroupError, match="must not contain"):
        GroupConfig(member)
    GroupConfig("g" * 235, broadcast=True)
    with pytest.raises(ConfigError, match="broadcasting group's name may have at most 235"):
        GroupConfig("g" * 236, broadcast=True)


def test_by_config_strategy_is_refused_with_the_reason() -> None:
    assert set(GROUP_STRATEGIES) == set(STRATEGY_NAMES) - {"by_config"}
    with pytest.raises(ConfigError, match="'by_config' is not offered: it needs a queue list"):
        GroupConfig("GID_a", rebalance_strategy="by_config")


def test_a_stored_by_config_group_loads_with_the_default_strategy(path: Path) -> None:
    write_json_atomic(path, {"groups": [{"name": "GID_old", "rebalance_strategy": "by_config"}]})
    groups = GroupManager(path)
    assert groups.require("GID_old").rebalance_strategy == "averagely"
    assert "'by_config' is not offered" in groups.load_problem
