"""Delay levels: the pure rewrite, and delivery over a real store driven by a fake clock."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.retry import DELAY_LEVELS_MS
from broker_core.broker.system_topics import SCHEDULE_TOPIC
from broker_core.broker.timer.schedule import (
    SCHEDULE_PROPERTIES,
    ScheduleService,
    level_due_ms,
    real_destination,
    restore_real_message,
    to_schedule_message,
)
from broker_core.errors import ConfigError, InvalidArgumentError
from broker_core.message import Message, StoredMessage
from broker_core.store.atomic_file import write_json_atomic
from broker_core.store.message_store import MessageStore
from tests.broker.timer.conftest import T0, StoreEnv, assert_thread_delivers_when_due, ns
from tests.store.conftest import make_message, small_config

# --------------------------------------------------------------------------- pure


def user_message(i: int, topic: str = "orders", queue_id: int = 0) -> Message:
    msg = make_message(i, topic=topic, queue_id=queue_id)
    msg.reconsume_times = i % 3
    msg.flag = 7
    msg.born_timestamp_ms = T0 - 5
    return msg


@pytest.mark.parametrize(("level", "queue_id"), [(1, 0), (2, 1), (5, 4), (17, 16), (18, 17)])
def test_to_schedule_message_rewrites_to_the_level_queue(level: int, queue_id: int) -> None:
    msg = user_message(3, topic="orders", queue_id=2)
    before = dict(msg.properties)
    out = to_schedule_message(msg, level, T0)
    assert (out.topic, out.queue_id) == (SCHEDULE_TOPIC, queue_id)
    assert out.properties == {
        **before,
        "REAL_TOPIC": "orders",
        "REAL_QID": "2",
        "DELAY": str(level),
    }
    assert (out.body, out.flag, out.reconsume_times) == (msg.body, 7, 0)
    assert out.born_timestamp_ms == T0 - 5  # the producer's time is kept
    assert msg.properties == before and msg.topic == "orders"  # input untouched


def test_to_schedule_message_stamps_born_time_only_when_missing() -> None:
    assert to_schedule_message(Message("t", b""), 1, T0).born_timestamp_ms == T0


@pytest.mark.parametrize("level", [0, 19, -1, True, "3"])
def test_to_schedule_message_rejects_bad_levels(level: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        to_schedule_message(Message("t", b""), level, T0)


@pytest.mark.parametrize(
    ("stored_ms", "level", "due_ms"),
    [
        (T0, 1, T0 + 1_000),
        (T0, 2, T0 + 5_000),
        (T0 + 7, 5, T0 + 7 + 60_000),
        (0, 18, 2 * 3_600_000),
    ],
)
def test_level_due_ms(stored_ms: int, level: int, due_ms: int) -> None:
    assert level_due_ms(stored_ms, level) == due_ms


def stored_of(msg: Message, store_ms: int = T0) -> StoredMessage:
    return StoredMessage(
        msg.topic,
        msg.queue_id,
        0,
        0,
        msg.body,
        dict(msg.properties),
        msg.flag,
        msg.sys_flag,
        msg.born_timestamp_ms,
        msg.born_host,
        store_ms,
        ("127.0.0.1", 1),
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        0,
        100,
    )


def test_restore_is_the_inverse_of_the_rewrite() -> None:
    msg = user_message(4, topic="payments", queue_id=3)
    back = restore_real_message(stored_of(to_schedule_message(msg, 6, T0)), SCHEDULE_PROPERTIES)
    assert back == msg


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"REAL_TOPIC": "t"},
        {"REAL_QID": "1"},
        {"REAL_TOPIC": "t", "REAL_QID": "x"},
        {"REAL_TOPIC": "", "REAL_QID": "1"},
        {"REAL_TOPIC": "t", "REAL_QID": "-1"},
    ],
)
def test_real_destination_requires_topic_and_queue(props: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        real_destination(props)


# --------------------------------------------------------------------------- integration


class Env(StoreEnv):
    """A real store and a schedule service in tmp_path, restartable, on one fake clock."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.offsets_path = root / "config" / "delayOffset.json"
        self.service: ScheduleService
        self.open()

    def open_service(self) -> None:
        self.service = ScheduleService(
            self.store, self.offsets_path, self.clock, max_idle_wait_ms=20
        )

    def close_service(self) -> None:
        self.service.close()

    def schedule(self, msg: Message, level: int) -> None:
        self.service.schedule(msg, level)
        assert self.store.wait_dispatched()

    def run(self, at_ms: int) -> int:
        self.clock.now_ms = at_ms
        return self.service.run_once(at_ms)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close()


def test_delivered_at_due_time_not_before(env: Env) -> None:
    for i, level in enumerate([1, 2, 3, 1, 2, 3]):
        env.schedule(user_message(i), level)
    assert env.service.next_due_ms() is None  # nothing read yet
    assert env.run(T0 + 999) == 0 and env.new() == []
    assert env.service.next_due_ms() == T0 + 1_000
    assert env.run(T0 + 1_000) == 2 and ns(env.new()) == [0, 3]
    assert env.service.next_due_ms() == T0 + 5_000
    assert env.run(T0 + 4_999) == 0 and env.new() == []
    assert env.run(T0 + 5_000) == 2 and ns(env.new()) == [1, 4]
    assert env.run(T0 + 9_999) == 0
    assert env.run(T0 + 10_000) == 2 and ns(env.new()) == [2, 5]
    assert env.service.offsets() == {1: 2, 2: 2, 3: 2}
    assert env.service.next_due_ms() is None


def test_each_level_delivers_in_store_order_as_time_passes(env: Env) -> None:
    for i in range(6):
        env.clock.now_ms = T0 + i * 400  # stored 400 ms apart, level 2 = 5 s
        env.schedule(user_message(i), 2)
    seen: list[int] = []
    for step_ms in range(0, 8_000, 100):
        now = T0 + step_ms
        env.run(now)
        seen += ns(env.new())
        assert seen == [i for i in range(6) if T0 + i * 400 + 5_000 <= now]
    assert seen == list(range(6))


def test_properties_restored_exactly(env: Env) -> None:
    originals = [user_message(i, topic="payments", queue_id=i % 3) for i in range(6)]
    for msg in originals:
        env.schedule(msg, 4)
    assert env.run(T0 + DELAY_LEVELS_MS[3]) == 6
    got = [m for q in range(3) for m in env.new("payments", q)]
    assert len(got) == 6
    by_n = {int(m.properties["n"]): m for m in got}
    for i, msg in enumerate(originals):
        back = by_n[i]
        assert back.properties == msg.properties  # UNIQ_KEY, KEYS, TAGS, user ones; no DELAY
        assert (back.topic, back.queue_id, back.body) == ("payments", i % 3, msg.body)
        assert (back.reconsume_times, back.flag, back.born_timestamp_ms) == (i % 3, 7, T0 - 5)
        assert back.message_id == msg.properties["UNIQ_KEY"]


def test_only_the_head_of_a_level_is_read_until_it_is_due(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(200):
        env.schedule(user_message(i), 18)
    reads: list[int] = []
    real_get = env.store.get_messages

    def counting_get(*args: Any, **kwargs: Any) -> Any:
        result = real_get(*args, **kwargs)
        if args[0].topic == SCHEDULE_TOPIC:
            reads.append(len(result.messages))
        return result

    monkeypatch.setattr(env.store, "get_messages", counting_get)
    assert env.run(T0 + 3_600_000) == 0
    level_18_reads = sum(reads)
    assert level_18_reads <= 64  # one batch at most, never the 200 pending
    reads.clear()
    for minute in range(1, 60):
        assert env.run(T0 + 3_600_000 + minute * 60_000) == 0
    assert reads == []  # the head's due time is known: nothing is read again
    assert env.run(T0 + 7_200_000) == 200
    assert ns(env.new()) == list(range(200))


def test_restart_mid_flight_loses_nothing(env: Env) -> None:
    for i in range(5):
        env.schedule(user_message(i), 1)
    for i in range(5, 10):
        env.schedule(user_message(i), 3)
    for i in range(10, 13):
        env.schedule(user_message(i), 5)
    assert env.run(T0 + 1_000) == 5
    env.restart()
    assert env.service.offsets() == {1: 5}
    assert env.run(T0 + 9_999) == 0
    assert env.run(T0 + 10_000) == 5
    env.restart()
    assert env.run(T0 + 60_000) == 3
    assert ns(env.new()) == list(range(13))  # every one, exactly once


def test_messages_due_during_downtime_arrive_at_first_run(env: Env) -> None:
    for i, level in enumerate([1, 2, 3, 4, 5, 6]):
        env.schedule(user_message(i), level)
    env.close()
    env.clock.now_ms = T0 + 2 * 60_000  # down for two minutes: levels 1..6 all fell due
    env.open()
    assert env.service.run_once() == 6
    assert ns(env.new()) == list(range(6))


def test_a_crash_before_the_offsets_are_written_redelivers_nothing_is_lost(env: Env) -> None:
    for i in range(4):
        env.schedule(user_message(i), 1)
    for i in range(4, 6):
        env.schedule(user_message(i), 2)
    write_json_atomic(env.offsets_path, {"offsets": {}})
    before_crash = env.offsets_path.read_bytes()
    assert env.run(T0 + 1_000) == 4
    env.close()
    env.offsets_path.write_bytes(before_crash)  # the offsets write was lost in the crash
    env.open()
    assert env.run(T0 + 5_000) == 6  # level 1 again (at-least-once) and level 2
    assert ns(env.new()) == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]


def test_a_message_without_destination_is_skipped_not_blocking(env: Env) -> None:
    env.schedule(user_message(0), 1)
    bad = Message(SCHEDULE_TOPIC, b"x", queue_id=0, properties={"DELAY": "1"})
    env.store.put_message(bad)
    env.schedule(user_message(2), 1)
    assert env.store.wait_dispatched()
    assert env.run(T0 + 1_000) == 2
    assert ns(env.new()) == [0, 2]
    assert env.service.offsets() == {1: 3}


def test_malformed_offsets_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "delayOffset.json"
    write_json_atomic(path, {"offsets": {"1": "many"}})
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    try:
        with pytest.raises(ConfigError, match="malformed"):
            ScheduleService(store, path)
    finally:
        store.close()


def test_thread_wakes_on_new_message_and_delivers_when_due(env: Env) -> None:
    put = functools.partial(env.schedule, user_message(0), 1)
    assert_thread_delivers_when_due(env, env.service, put, T0 + 1_000)
    assert ns(env.new()) == [0]
