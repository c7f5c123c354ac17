"""Tests for TopicManager: the persisted topic table, lookups and permissions, system, retry
and DLQ topics, and the send path over a real store across a restart."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.order import queue_for_message_group
from broker_core.broker.system_topics import REVIVE_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC
from broker_core.broker.topics import Perm, TopicConfig, TopicManager, system_topic_configs
from broker_core.errors import (
    ConfigError,
    CorruptionError,
    InvalidArgumentError,
    InvalidGroupError,
    InvalidTopicError,
    PermissionDeniedError,
    TopicNotFoundError,
)
from broker_core.message import PROPERTY_MESSAGE_GROUP
from broker_core.store.atomic_file import write_json_atomic
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message, small_config


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "topics.json"


@pytest.fixture
def topics(path: Path) -> TopicManager:
    return TopicManager(path)


# --------------------------------------------------------------------------- persistence


def test_new_manager_starts_empty_without_a_file(topics: TopicManager, path: Path) -> None:
    assert topics.list() == []
    assert not path.exists()


def test_persistence_round_trip(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("orders", 16, 8, Perm.READ_WRITE, "FIFO", {"k": "v"}))
    topics.create_or_update(TopicConfig("audit", 2, 2, Perm.READ))
    topics.for_send("clicks")
    topics.ensure_system_topics()
    topics.ensure_retry_topic("GID_a")
    reopened = TopicManager(path)
    assert reopened.list() == topics.list()
    assert reopened.load_problem == ""
    assert [c.name for c in reopened.list()] == sorted(c.name for c in reopened.list())


def test_update_replaces_and_persists(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("orders", 8, 8))
    topics.create_or_update(TopicConfig("orders", 8, 4, Perm.READ))
    assert TopicManager(path).require("orders") == TopicConfig("orders", 8, 4, Perm.READ)


def test_identical_update_does_not_rewrite(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("orders"))
    topics.create_or_update(TopicConfig("orders"))
    topics.for_send("orders")
    assert not path.with_name("topics.json.bak").exists()


def test_corrupt_file_loads_backup(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("first"))
    topics.create_or_update(TopicConfig("second"))
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    reopened = TopicManager(path)
    assert [c.name for c in reopened.list()] == ["first"]
    assert "topics.json" in reopened.load_problem


def test_torn_file_loads_backup(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("first"))
    topics.create_or_update(TopicConfig("second"))
    path.write_bytes(path.read_bytes()[:20])
    assert [c.name for c in TopicManager(path).list()] == ["first"]


def test_crash_between_renames_loads_backup(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("first"))
    topics.create_or_update(TopicConfig("second"))
    path.unlink()  # write_json_atomic moved the old file to .bak, died before the rename
    assert [c.name for c in TopicManager(path).list()] == ["first"]


@pytest.mark.parametrize("with_backup", [True, False])
def test_unreadable_file_and_backup_raise(
    topics: TopicManager, path: Path, with_backup: bool
) -> None:
    topics.create_or_update(TopicConfig("first"))
    if with_backup:
        topics.create_or_update(TopicConfig("second"))
        path.with_name("topics.json.bak").write_bytes(b"{garbage")
    path.write_bytes(b"not json")
    with pytest.raises(CorruptionError, match=r"topics\.json"):
        TopicManager(path)


@pytest.mark.parametrize(
    "data",
    [{"nope": []}, {"topics": [{"name": "t", "perm": 3}]}, {"topics": [{"size": 1}]}, []],
)
def test_malformed_but_checksummed_file_raises(path: Path, data: Any) -> None:
    write_json_atomic(path, data)
    with pytest.raises(ConfigError):
        TopicManager(path)


def test_failed_write_changes_nothing(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("kept"))
    shutil.rmtree(path.parent)
    path.parent.write_bytes(b"")  # a file where the config directory should be
    with pytest.raises(OSError):
        topics.create_or_update(TopicConfig("lost"))
    with pytest.raises(OSError):
        topics.for_send("auto")
    with pytest.raises(OSError):
        topics.delete("kept")
    assert [c.name for c in topics.list()] == ["kept"]


def test_concurrent_auto_create_makes_one_topic(topics: TopicManager, path: Path) -> None:
    barrier = threading.Barrier(8)
    results: list[TopicConfig] = []

    def send() -> None:
        barrier.wait()
        results.append(topics.for_send("hot"))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and len(set(results)) == 1
    assert TopicManager(path).list() == [results[0]]


# --------------------------------------------------------------------------- lookups


def test_require_and_get(topics: TopicManager) -> None:
    assert topics.get("missing") is None
    with pytest.raises(TopicNotFoundError, match="missing"):
        topics.require("missing")
    topics.create_or_update(TopicConfig("present"))
    assert topics.require("present") == TopicConfig("present")


def test_create_or_update_rejects_non_config(topics: TopicManager) -> None:
    with pytest.raises(InvalidArgumentError):
        topics.create_or_update({"name": "t"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("perm", "send_ok", "read_ok"),
    [(Perm.WRITE, True, False), (Perm.READ, False, True), (Perm.READ_WRITE, True, True)],
)
def test_perm_enforcement(topics: TopicManager, perm: int, send_ok: bool, read_ok: bool) -> None:
    topics.create_or_update(TopicConfig("t", perm=perm))
    for operation, allowed in ((topics.for_send, send_ok), (topics.for_read, read_ok)):
        if allowed:
            assert operation("t").perm == perm
        else:
            with pytest.raises(PermissionDeniedError, match=r"not (writeable|readable)"):
                operation("t")


@pytest.mark.parametrize(
    ("name", "auto_create", "created"),
    [
        ("orders", True, True),
        ("orders", False, False),
        ("%RETRY%GID_a", True, False),
        ("%DLQ%GID_a", True, False),
        (SCHEDULE_TOPIC, True, False),
        (REVIVE_TOPIC, True, False),
        ("rmq_sys_custom", True, False),
    ],
)
def test_auto_create_on_send(path: Path, name: str, auto_create: bool, created: bool) -> None:
    topics = TopicManager(path, auto_create=auto_create, default_queue_nums=4)
    if created:
        config = topics.for_send(name)
        assert config == TopicConfig(name, 4, 4, Perm.READ_WRITE, "MIXED")
        assert TopicManager(path).require(name) == config
    else:
        with pytest.raises(TopicNotFoundError):
            topics.for_send(name)
        assert topics.get(name) is None


def test_for_read_never_auto_creates(topics: TopicManager) -> None:
    with pytest.raises(TopicNotFoundError):
        topics.for_read("orders")


@pytest.mark.parametrize("name", ["", "has space", "x" * 200])
def test_for_send_rejects_bad_names(topics: TopicManager, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        topics.for_send(name)
    assert topics.list() == []


@pytest.mark.parametrize("bad", [0, 1025, True])
def test_default_queue_nums_validated(path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError, match="default_queue_nums"):
        TopicManager(path, default_queue_nums=bad)


def test_delete(topics: TopicManager, path: Path) -> None:
    topics.create_or_update(TopicConfig("a"))
    topics.create_or_update(TopicConfig("b"))
    assert topics.delete("a") is True
    assert topics.delete("a") is False
    assert [c.name for c in TopicManager(path).list()] == ["b"]


def test_system_topics_cannot_be_deleted(topics: TopicManager) -> None:
    topics.ensure_system_topics()
    with pytest.raises(InvalidTopicError, match="system topic"):
        topics.delete(SCHEDULE_TOPIC)
    assert topics.get(SCHEDULE_TOPIC) is not None


# --------------------------------------------------------------------------- system topics


def test_ensure_system_topics(topics: TopicManager, path: Path) -> None:
    ensured = topics.ensure_system_topics()
    assert ensured == system_topic_configs()
    assert topics.require(SCHEDULE_TOPIC).write_queue_nums == 18
    assert TopicManager(path).list() == sorted(ensured, key=lambda c: c.name)
    assert topics.ensure_system_topics() == ensured
    assert not path.with_name("topics.json.bak").exists()  # the second call wrote nothing


def test_ensure_system_topics_keeps_existing(topics: TopicManager) -> None:
    custom = TopicConfig(REVIVE_TOPIC, 4, 4)
    topics.create_or_update(custom)
    ensured = topics.ensure_system_topics()
    assert custom in ensured
    assert topics.require(REVIVE_TOPIC) == custom
    assert topics.require(TIMER_TOPIC).write_queue_nums == 1


@pytest.mark.parametrize(
    ("ensure", "prefix"),
    [(TopicManager.ensure_retry_topic, "%RETRY%"), (TopicManager.ensure_dlq_topic, "%DLQ%")],
)
def test_ensure_retry_and_dlq_topics(
    topics: TopicManager, path: Path, ensure: Any, prefix: str
) -> None:
    config = ensure(topics, "GID_orders")
    assert config == TopicConfig(prefix + "GID_orders", 1, 1, Perm.READ_WRITE)
    assert ensure(topics, "GID_orders") == config
    assert TopicManager(path).require(prefix + "GID_orders") == config
    assert topics.for_send(prefix + "GID_orders") == config  # sendable once it exists
    with pytest.raises(InvalidGroupError):
        ensure(topics, "bad group")


# --------------------------------------------------------------------------- queue choice


def test_write_queue_for_uses_write_count(topics: TopicManager) -> None:
    topics.create_or_update(TopicConfig("t", read_queue_nums=8, write_queue_nums=3))
    assert [topics.write_queue_for("t", None, n) for n in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert topics.write_queue_for("t", "g", 5) == queue_for_message_group("g", 3)
    with pytest.raises(TopicNotFoundError):
        topics.write_queue_for("absent", None, 0)


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


def _send(
    topics: TopicManager, store: MessageStore, topic: str, first: int, count: int
) -> list[tuple[int, int]]:
    """Send messages ``first..first+count-1``; every third one carries a message group."""
    messages = []
    for i in range(first, first + count):
        group = f"g{i % 2}" if i % 3 == 0 else None
        message = make_message(i, topic=topic)
        if group is not None:
            message.properties[PROPERTY_MESSAGE_GROUP] = group
        message.queue_id = topics.write_queue_for(topics.for_send(topic).name, group, i)
        messages.append(message)
    return [(r.queue_id, r.queue_offset) for r in store.put_messages(messages)]


def _read_all(topics: TopicManager, store: MessageStore, topic: str) -> dict[int, list[int]]:
    """{queue id: [message number, ...]} over every readable queue."""
    store.wait_dispatched()
    result: dict[int, list[int]] = {}
    for queue in topics.for_read(topic).read_queues("broker-a"):
        got = store.get_messages(QueueRead(topic, queue.queue_id, 0, 1000))
        result[queue.queue_id] = [int(m.properties["n"]) for m in got.messages]
    return result


def test_send_path_survives_restart(path: Path, open_store: Callable[[], MessageStore]) -> None:
    """Auto-create, send, restart store and topics, shrink writes, send more: all readable."""
    topics = TopicManager(path, default_queue_nums=4)
    store = open_store()
    _send(topics, store, "orders", 0, 40)
    store.close()

    topics = TopicManager(path)  # restart: the auto-created topic is still there
    assert topics.require("orders") == TopicConfig("orders", 4, 4)
    topics.create_or_update(TopicConfig("orders", read_queue_nums=4, write_queue_nums=2))
    store = open_store()
    placed = _send(topics, store, "orders", 40, 20)
    assert {queue_id for queue_id, _ in placed} <= {0, 1}
    by_queue = _read_all(topics, store, "orders")

    assert sorted(n for numbers in by_queue.values() for n in numbers) == list(range(60))
    for group in ("g0", "g1"):  # one message group stays in one queue across the restart
        holders = {
            q
            for q, numbers in by_queue.items()
            for n in numbers
            if n % 3 == 0 and f"g{n % 2}" == group and n < 40
        }
        assert holders == {queue_for_message_group(group, 4)}
