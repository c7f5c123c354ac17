"""Timers: pure policy, the on-disk log and wheel, and the service over a real store."""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.system_topics import TIMER_TOPIC
from broker_core.broker.timer.log import (
    FLAG_CANCEL,
    FLAG_SCHEDULE,
    RECORD_BYTES,
    TimerLog,
    TimerRecord,
    decode_record,
    encode_record,
)
from broker_core.broker.timer.policy import (
    PROPERTY_TIMER_DELIVER_MS,
    deliver_time_of,
    link_target_ms,
    plan_firing,
    slot_time_ms,
    to_timer_message,
)
from broker_core.broker.timer.timer import CHECKPOINT_FILE, LOG_FILE, WHEEL_FILE, TimerService
from broker_core.broker.timer.wheel import SLOT_BYTES, TimingWheel
from broker_core.errors import ConfigError, CorruptionError, InvalidArgumentError
from broker_core.message import Message
from broker_core.store.queue_read import QueueRead
from tests.broker.timer.conftest import T0, S, StoreEnv, assert_thread_delivers_when_due, ns
from tests.store.conftest import make_message

# --------------------------------------------------------------------------- pure policy


@pytest.mark.parametrize(
    ("deliver_ms", "precision_ms", "slot_ms"),
    [
        (0, 1000, 0),
        (1, 1000, 1000),
        (999, 1000, 1000),
        (1000, 1000, 1000),
        (1001, 1000, 2000),
        (T0 + 1, 1000, T0 + 1000),
        (12345, 1, 12345),
        (250, 100, 300),
    ],
)
def test_slot_time_rounds_up_so_nothing_fires_early(
    deliver_ms: int, precision_ms: int, slot_ms: int
) -> None:
    assert slot_time_ms(deliver_ms, precision_ms) == slot_ms
    assert slot_ms >= deliver_ms and slot_ms - deliver_ms < precision_ms


@pytest.mark.parametrize(
    ("deliver_ms", "read_ms", "horizon_ms", "target"),
    [
        (1_500, 3_000, 10_000, None),  # its slot (2 s) already fired: due now
        (2_000, 3_000, 10_000, None),
        (2_001, 3_000, 10_000, 3_000),  # the slot about to fire
        (5_500, 3_000, 10_000, 6_000),
        (10_000, 3_000, 10_000, 10_000),  # the last slot in range
        (10_001, 3_000, 10_000, 10_000),  # beyond: parked at the horizon, rolled later
        (99_999_000, 3_000, 10_000, 10_000),
    ],
)
def test_link_target(deliver_ms: int, read_ms: int, horizon_ms: int, target: int | None) -> None:
    assert link_target_ms(deliver_ms, read_ms, horizon_ms, 1_000) == target


def rec(deliver_ms: int, phys: int, flags: int = FLAG_SCHEDULE) -> TimerRecord:
    return TimerRecord(deliver_ms, phys, 100, flags)


@pytest.mark.parametrize(
    ("chain", "deliver", "roll", "recalled", "duplicates"),
    [
        ([], [], [], 0, 0),
        # ordered by due time, then by append position (the chain is newest first)
        ([(72, rec(900, 3)), (36, rec(500, 2)), (0, rec(900, 1))], [2, 1, 3], [], 0, 0),
        # a cancel drops its timer wherever it sits in the chain
        ([(72, rec(800, 2, FLAG_CANCEL)), (36, rec(900, 2)), (0, rec(700, 1))], [1], [], 1, 0),
        ([(36, rec(800, 2)), (0, rec(800, 2, FLAG_CANCEL))], [], [], 1, 0),
        # re-ingested after a crash: delivered once
        ([(72, rec(800, 2)), (36, rec(800, 2)), (0, rec(600, 1))], [1, 2], [], 0, 1),
        # not yet due (parked beyond the horizon): rolled, cancels too
        (
            [(72, rec(5_000, 4)), (36, rec(5_000, 5, FLAG_CANCEL)), (0, rec(1_000, 1))],
            [1],
            [5, 4],
            0,
            0,
        ),
    ],
)
def test_plan_firing(
    chain: list[tuple[int, TimerRecord]],
    deliver: list[int],
    roll: list[int],
    recalled: int,
    duplicates: int,
) -> None:
    plan = plan_firing(chain, 1_000, 1_000)
    assert [r.phys_offset for r in plan.deliver] == deliver
    assert [r.phys_offset for r in plan.roll] == roll
    assert (plan.recalled, plan.duplicates) == (recalled, duplicates)


def test_to_timer_message_rewrites_and_keeps_the_original() -> None:
    msg = make_message(1, topic="orders", queue_id=3)
    before = dict(msg.properties)
    out = to_timer_message(msg, T0 + 5_000)
    assert (out.topic, out.queue_id, out.body) == (TIMER_TOPIC, 0, msg.body)
    assert out.properties == {
        **before,
        "REAL_TOPIC": "orders",
        "REAL_QID": "3",
        "TIMER_ID": before["UNIQ_KEY"],
        PROPERTY_TIMER_DELIVER_MS: str(T0 + 5_000),
    }
    assert msg.properties == before and msg.topic == "orders"


def test_to_timer_message_assigns_an_id_and_reads_the_delivery_property() -> None:
    msg = Message("orders", b"x", properties={"__STARTDELIVERTIME": str(T0)})
    out = to_timer_message(msg)
    assert out.properties["TIMER_ID"] == out.properties["UNIQ_KEY"] != ""
    assert deliver_time_of(out.properties) == T0
    assert out.properties["__STARTDELIVERTIME"] == str(T0)  # the user's property stays


@pytest.mark.parametrize("deliver_at", [-1, True, 1.5, "10"])
def test_to_timer_message_rejects_bad_times(deliver_at: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        to_timer_message(Message("orders", b""), deliver_at)


@pytest.mark.parametrize("props", [{}, {"__STARTDELIVERTIME": "soon"}, {"TIMER_DELIVER_MS": ""}])
def test_deliver_time_of_rejects_missing_or_malformed(props: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        deliver_time_of(props)


# --------------------------------------------------------------------------- log and wheel


def test_record_round_trip_and_checksum() -> None:
    record = TimerRecord(T0, 1 << 40, 321, FLAG_CANCEL, 72)
    raw = encode_record(record)
    assert len(raw) == RECORD_BYTES == 36
    assert decode_record(raw) == record
    for i in range(RECORD_BYTES):
        bad = bytearray(raw)
        bad[i] ^= 0x40
        with pytest.raises(CorruptionError):
            decode_record(bytes(bad))


@pytest.mark.parametrize("cut", range(2 * RECORD_BYTES, 3 * RECORD_BYTES + 1))
def test_torn_log_tail_is_truncated_to_whole_records(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "timerlog"
    log = TimerLog(path)
    positions = log.append_many([rec(T0 + i, i) for i in range(3)])
    log.close()
    with open(path, "r+b") as fh:
        fh.truncate(cut)
    log = TimerLog(path)
    whole = cut // RECORD_BYTES
    assert log.end == whole * RECORD_BYTES and log.dropped_bytes == cut - log.end
    assert [log.read(p).phys_offset for p in positions[:whole]] == list(range(whole))
    with pytest.raises(CorruptionError, match="outside the log"):
        log.read(whole * RECORD_BYTES)
    log.close()


def test_unsynced_garbage_after_the_last_record_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "timerlog"
    log = TimerLog(path)
    log.append_many([rec(T0, 1), rec(T0, 2)])
    log.close()
    with open(path, "ab") as fh:
        fh.write(os.urandom(RECORD_BYTES * 2))
    log = TimerLog(path)
    assert (log.end, log.dropped_bytes) == (2 * RECORD_BYTES, 2 * RECORD_BYTES)
    log.close()


def test_wheel_chains_records_per_slot_and_detects_damage(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog")
    wheel = TimingWheel(tmp_path / "timerwheel", 1_000, 8)
    wheel.link(log, [(3_000, rec(2_500, 1)), (5_000, rec(4_100, 2)), (3_000, rec(2_900, 3))])
    wheel.link(log, [(3_000, rec(3_000, 4))])
    assert [r.phys_offset for _, r in wheel.walk(log, 3_000)] == [4, 3, 1]
    assert [r.phys_offset for _, r in wheel.walk(log, 5_000)] == [2]
    assert wheel.walk(log, 11_000) == []  # same slot as 3 000, another turn: stale
    wheel.link(log, [(11_000, rec(10_500, 5))])  # the next turn takes the slot over
    assert [r.phys_offset for _, r in wheel.walk(log, 11_000)] == [5]
    assert wheel.walk(log, 3_000) == []
    wheel.close()
    with open(tmp_path / "timerwheel", "r+b") as fh:
        fh.seek(5 * SLOT_BYTES + 9)
        fh.write(b"\xff")
    wheel = TimingWheel(tmp_path / "timerwheel", 1_000, 8)
    with pytest.raises(CorruptionError, match="slot fails its checksum"):
        wheel.walk(log, 5_000)
    wheel.close()
    with pytest.raises(ConfigError, match="wheel size changed"):
        TimingWheel(tmp_path / "timerwheel", 1_000, 16)
    log.close()


# --------------------------------------------------------------------------- service


class Env(StoreEnv):
    """A real store and a timer service in tmp_path, restartable, on one fake clock."""

    def __init__(self, root: Path, wheel_slots: int = 60) -> None:
        super().__init__(root)
        self.wheel_slots = wheel_slots
        self.timers: TimerService
        self.open()

    def open_service(self) -> None:
        self.timers = TimerService(
            self.store,
            self.root / "timer",
            precision_ms=S,
            wheel_slots=self.wheel_slots,
            clock_ms=self.clock,
            max_idle_wait_ms=20,
        )

    def close_service(self) -> None:
        self.timers.close()

    def add(self, i: int, deliver_at_ms: int) -> str:
        return self.timers.schedule(make_message(i), deliver_at_ms).message_id

    def run(self, at_ms: int) -> int:
        self.clock.now_ms = at_ms
        assert self.store.wait_dispatched()
        return self.timers.run_once(at_ms)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close()


def test_many_random_timers_arrive_on_time_in_order_exactly_once(env: Env) -> None:
    rng = random.Random(20240607)
    due = {i: T0 + rng.randrange(0, 150 * S) for i in range(300)}  # horizon is only 59 s
    for i, at in due.items():
        env.add(i, at)
    seen: list[int] = []
    for now in range(T0, T0 + 152 * S, S):
        env.run(now)
        seen += ns(env.new())
        assert set(seen) == {i for i, at in due.items() if slot_time_ms(at, S) <= now}
        assert all(due[i] <= now for i in seen)  # none early
    assert sorted(seen) == list(range(300))  # none lost, none duplicated
    assert [due[i] for i in seen] == sorted(due.values())  # in due order
    assert env.timers.stats.rolled > 0


def test_delivered_message_is_restored_exactly(env: Env) -> None:
    msg = make_message(7, topic="payments", queue_id=2)
    msg.reconsume_times, msg.flag, msg.born_timestamp_ms = 2, 9, T0 - 1
    env.timers.schedule(msg, T0 + 3 * S)
    assert env.run(T0 + 2 * S) == 0
    assert env.run(T0 + 3 * S) == 1
    assert env.store.wait_dispatched()
    back = env.store.get_messages(QueueRead("payments", 2, 0, 10)).messages[0]
    assert back.properties == msg.properties
    assert (back.body, back.reconsume_times, back.flag, back.born_timestamp_ms) == (
        msg.body,
        2,
        9,
        T0 - 1,
    )
    assert back.message_id == msg.properties["UNIQ_KEY"]


def test_timer_far_beyond_the_horizon_is_rolled_and_fires_on_time(tmp_path: Path) -> None:
    env = Env(tmp_path, wheel_slots=10)
    try:
        env.add(1, T0 + 100 * S + 1)  # ten turns of a 10-slot wheel away
        env.add(2, T0 + 4 * S)
        env.run(T0 + 100 * S)
        assert ns(env.new()) == [2]
        assert env.timers.stats.rolled >= 10
        assert env.run(T0 + 101 * S) == 1 and ns(env.new()) == [1]
    finally:
        env.close()


def test_firing_a_tick_reads_only_that_slots_chain(env: Env) -> None:
    for i in range(10):
        env.add(i, T0 + 5 * S - i)  # all in the 5 s slot
    for i in range(10, 14):
        env.add(i, T0 + 7 * S)
    for i in range(14, 40):
        env.add(i, T0 + 50 * S)
    env.run(T0)
    stats = env.timers.stats
    visited = stats.records_visited
    assert env.run(T0 + 4 * S) == 0 and stats.records_visited == visited
    assert env.run(T0 + 5 * S) == 10 and stats.records_visited == visited + 10
    assert env.run(T0 + 6 * S) == 0 and stats.records_visited == visited + 10
    assert env.run(T0 + 7 * S) == 4 and stats.records_visited == visited + 14


def test_late_ingested_timer_is_delivered_at_once(env: Env) -> None:
    env.run(T0 + 10 * S)
    env.add(1, T0 + 2 * S)  # its slot fired before the service saw it
    assert env.run(T0 + 10 * S) == 1 and ns(env.new()) == [1]


def test_recall_before_due_is_never_delivered(env: Env) -> None:
    ids = [env.add(i, T0 + (i + 1) * S) for i in range(3)]
    assert env.timers.recall(ids[1]) is True  # before the service even ingested it
    assert env.timers.recall(ids[1]) is True  # idempotent
    assert env.timers.recall("NO-SUCH-TIMER") is False
    env.run(T0 + 5 * S)
    assert ns(env.new()) == [0, 2]
    assert env.timers.recall(ids[0]) is False  # already delivered
    assert env.timers.recall(ids[1]) is False  # its time has passed
    assert env.timers.stats.recalled == 2


def test_recall_survives_restart_also_beyond_the_horizon(env: Env) -> None:
    near = env.add(1, T0 + 20 * S)
    far = env.add(2, T0 + 200 * S)
    keep = env.add(3, T0 + 30 * S)
    env.run(T0 + S)
    assert env.timers.recall(near) and env.timers.recall(far)
    env.restart()
    for now in range(T0 + S, T0 + 202 * S, 10 * S):
        env.run(now)
    assert ns(env.new()) == [3]
    assert keep


def test_restart_with_pending_timers_and_some_due_during_downtime(env: Env) -> None:
    due = {i: T0 + (i + 1) * 2 * S for i in range(20)}  # every 2 s up to 40 s
    for i, at in due.items():
        env.add(i, at)
    env.run(T0 + 10 * S)
    assert ns(env.new()) == [0, 1, 2, 3, 4]
    env.close()
    env.clock.now_ms = T0 + 30 * S  # down for 20 s
    env.open()
    env.run(T0 + 30 * S)
    assert ns(env.new()) == list(range(5, 15))
    env.run(T0 + 41 * S)
    assert ns(env.new()) == list(range(15, 20))


def test_crash_before_checkpoint_redelivers_but_loses_nothing(env: Env) -> None:
    due = {i: T0 + (i % 10 + 1) * S + (i * 97) % S for i in range(30)}
    due[30] = T0 + 90 * S  # parked at the horizon, rolled later
    for i, at in due.items():
        env.add(i, at)
    checkpoint = env.root / "timer" / CHECKPOINT_FILE
    env.run(T0)
    stale = checkpoint.read_bytes()  # ingest offset and read time before any firing
    env.run(T0 + 5 * S)
    first = ns(env.new())
    assert sorted(first) == sorted(i for i, at in due.items() if slot_time_ms(at, S) <= T0 + 5 * S)
    env.close()
    checkpoint.write_bytes(stale)  # the crash lost every checkpoint written after it
    env.open()
    env.run(T0 + 91 * S)
    again = ns(env.new())
    assert sorted(again) == sorted([*first, *(i for i in due if i not in first)])
    assert sorted(set(first) | set(again)) == list(range(31))


class Crash(Exception):
    """Stands for the process dying at the point where it is raised."""


def test_crash_mid_tick_after_a_roll_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(tmp_path, wheel_slots=10)
    try:
        # Two parked timers in neighbouring slots, both rolled in the tick that dies: the
        # replay from the checkpoint must find their chains (or their rolls) intact.
        env.add(1, T0 + 100 * S)
        env.run(T0)  # timer 1 parked in the horizon slot, 9 s
        env.add(4, T0 + 100 * S + 1)
        env.run(T0 + S)  # timer 4 parked in the 10 s slot
        env.run(T0 + 7 * S)  # checkpoint: read time 8 s
        env.add(2, T0 + 8 * S)  # re-ingested by the replay
        env.add(3, T0 + 10 * S)
        real_put = env.store.put_messages

        def dying_put(messages: list[Message]) -> Any:
            if any(m.properties.get("n") == "3" for m in messages):
                raise Crash()  # slots 9 s and 10 s rolled timers 1 and 4; no checkpoint
            return real_put(messages)

        monkeypatch.setattr(env.store, "put_messages", dying_put)
        with pytest.raises(Crash):
            env.run(T0 + 10 * S)
        monkeypatch.undo()
        env.store.close()  # the timer service is abandoned: no close, no checkpoint
        env.open()
        for now in [*range(T0 + 10 * S, T0 + 100 * S, 5 * S), T0 + 101 * S]:
            env.run(now)
        got = ns(env.new())
        assert sorted(set(got)) == [1, 2, 3, 4]
        assert [got.count(i) for i in (1, 3, 4)] == [1, 1, 1]  # 2 may repeat: at-least-once
    finally:
        env.close()


def test_checkpoint_with_other_geometry_is_refused(env: Env) -> None:
    env.run(T0)
    env.close()
    with pytest.raises(ConfigError, match="keep the old values"):
        TimerService(env.store, env.root / "timer", precision_ms=S, wheel_slots=30)
    env.open()


def test_files_are_where_the_docs_say(env: Env) -> None:
    env.add(1, T0 + S)
    env.run(T0 + S)
    names = {p.name for p in (env.root / "timer").iterdir()}
    assert {CHECKPOINT_FILE, LOG_FILE, WHEEL_FILE} <= names
    assert (env.root / "timer" / WHEEL_FILE).stat().st_size == 60 * SLOT_BYTES


def test_thread_fires_when_the_clock_reaches_the_slot(env: Env) -> None:
    put = functools.partial(env.add, 1, T0 + 2 * S)
    assert_thread_delivers_when_due(env, env.timers, put, T0 + 2 * S)
    assert ns(env.new()) == [1]
