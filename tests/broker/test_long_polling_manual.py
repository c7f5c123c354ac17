"""Long polling by run_once on a fake clock: filtering, deadlines, overflow, failures, restart."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore
from tests.broker.conftest import LONG_TIMEOUT_MS, Answers, DispatchWatcher, FakeClock, msg
from tests.store.conftest import small_config

# ---- driven by run_once with a fake clock ---------------------------------------------------


def test_filtered_pull_stays_parked_and_skips_rejected_units(
    store: MessageStore, manual: LongPollingService, clock: FakeClock
) -> None:
    watcher = DispatchWatcher(store)
    answers = Answers()
    parked = manual.park(
        PullRequest("t", 0, 0, filter=MessageFilter("TAG", "TagA")),
        clock.now_ms + 1_000,
        answers.callback(),
    )
    assert parked is not None
    store.put_messages([msg("TagB"), msg("TagB")])
    watcher.wait_for("t", 0, 2)
    assert manual.run_once(clock.now_ms) == 0
    assert answers.results == [] and manual.parked_count == 1
    assert parked.request.offset == 2  # the rejected units are not scanned again
    store.put_messages([msg("TagA", body=b"a")])
    watcher.wait_for("t", 0, 3)
    assert manual.run_once(clock.now_ms) == 1
    assert [m.body for m in answers.only.messages] == [b"a"] and answers.only.next_offset == 3


def test_timeout_after_filtering_carries_the_offset_reached(
    store: MessageStore, manual: LongPollingService, clock: FakeClock
) -> None:
    watcher = DispatchWatcher(store)
    answers = Answers()
    manual.park(
        PullRequest("t", 0, 0, filter=MessageFilter("TAG", "TagA")),
        clock.now_ms + 100,
        answers.callback(),
    )
    store.put_messages([msg("TagB")] * 3)
    watcher.wait_for("t", 0, 3)
    assert manual.run_once(clock.now_ms + 99) == 0
    assert manual.run_once(clock.now_ms + 100) == 1
    assert answers.only.status is PullStatus.NO_NEW_MESSAGE
    assert (answers.only.next_offset, answers.only.max_offset) == (3, 3)


def test_deadlines_with_a_fake_clock(manual: LongPollingService, clock: FakeClock) -> None:
    answers = Answers()
    for qid, timeout_ms in enumerate([300, 100, 200]):
        manual.park(PullRequest("t", qid, 0), clock.now_ms + timeout_ms, answers.callback(str(qid)))
    assert manual.run_once(clock.now_ms + 99) == 0
    assert manual.run_once(clock.now_ms + 200) == 2
    assert [name for name, _ in answers.results] == ["1", "2"]
    assert manual.run_once(clock.now_ms + 10_000) == 1 and manual.parked_count == 0


def test_message_that_arrived_before_park_answers_at_once(
    store: MessageStore, manual: LongPollingService, clock: FakeClock
) -> None:
    store.put_messages([msg("A")])
    assert store.wait_dispatched()  # dispatched while nothing was parked: no wake-up
    answers = Answers()
    manual.park(PullRequest("t", 0, 0), clock.now_ms + 1_000, answers.callback())
    assert manual.run_once(clock.now_ms) == 1
    assert answers.only.status is PullStatus.FOUND


def test_overflow_is_answered_immediately(store: MessageStore, clock: FakeClock) -> None:
    service = LongPollingService(store, clock_ms=clock, max_parked=2)
    answers = Answers()
    handles = [
        service.park(PullRequest("t", 0, 0), clock.now_ms + 1_000, answers.callback(str(i)))
        for i in range(3)
    ]
    assert handles[0] is not None and handles[1] is not None and handles[2] is None
    assert [name for name, _ in answers.results] == ["2"]
    assert answers.results[0][1].status is PullStatus.NO_NEW_MESSAGE
    assert service.parked_count == 2
    service.stop()
    assert len(answers.results) == 3


def test_cancel_removes_without_answering(
    store: MessageStore, manual: LongPollingService, clock: FakeClock
) -> None:
    watcher = DispatchWatcher(store)
    answers = Answers()
    parked = manual.park(PullRequest("t", 0, 0), clock.now_ms + 1_000, answers.callback())
    assert parked is not None and manual.cancel(parked) and not manual.cancel(parked)
    store.put_messages([msg("A")])
    watcher.wait_for("t", 0, 1)
    assert manual.run_once(clock.now_ms + 5_000) == 0 and answers.results == []


def test_a_failing_callback_is_logged_and_the_service_goes_on(
    store: MessageStore,
    manual: LongPollingService,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watcher = DispatchWatcher(store)
    answers = Answers()

    def broken(result: PullResult) -> None:
        raise RuntimeError("consumer went away")

    manual.park(PullRequest("t", 0, 0), clock.now_ms + 1_000, broken)
    manual.park(PullRequest("t", 0, 0), clock.now_ms + 1_000, answers.callback())
    store.put_messages([msg("A")])
    watcher.wait_for("t", 0, 1)
    with caplog.at_level(logging.ERROR, logger="broker_core.broker.long_polling"):
        assert manual.run_once(clock.now_ms) == 2
    assert "long polling callback failed" in caplog.text
    assert answers.only.status is PullStatus.FOUND


# ---- restart ------------------------------------------------------------------------------------


def test_restart_in_the_middle_loses_nothing(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    store.open()
    polling = LongPollingService(store)
    polling.start()
    store.put_messages([msg("A", body=f"m{i}".encode()) for i in range(3)])
    first = polling.pull_blocking(PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
    assert [m.body for m in first.messages] == [b"m0", b"m1", b"m2"]
    answers = Answers()
    far_ms = time.monotonic_ns() // 10**6 + LONG_TIMEOUT_MS
    polling.pull_or_park(PullRequest("t", 0, first.next_offset), far_ms, answers.callback())
    polling.stop()  # the parked pull is answered, not stuck
    assert answers.only.status is PullStatus.NO_NEW_MESSAGE and answers.only.next_offset == 3
    store.put_messages([msg("A", body=b"m3")])  # arrives while the service is down
    store.close()

    store = MessageStore(config)
    store.open()
    polling = LongPollingService(store)
    polling.start()
    try:
        again = polling.pull_blocking(
            PullRequest("t", 0, answers.only.next_offset), timeout_ms=LONG_TIMEOUT_MS
        )
        assert [m.body for m in again.messages] == [b"m3"]
        later = Answers()
        polling.pull_or_park(
            PullRequest("t", 0, again.next_offset),
            time.monotonic_ns() // 10**6 + LONG_TIMEOUT_MS,
            later.callback(),
        )
        store.put_messages([msg("A", body=b"m4")])
        assert later.wait(1)
        assert [m.body for m in later.only.messages] == [b"m4"]
    finally:
        polling.stop()
        store.close()
