"""Long polling over a real store: parked pulls answered on dispatch, at timeout, on stop."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.message import Message
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore
from tests.broker.async_pull import pull_async
from tests.store.conftest import small_config

LONG_TIMEOUT_MS = 10_000  # a parked pull answered well before this was woken by dispatch


class DispatchWatcher:
    """A dispatch listener registered after the service's: once it has seen a queue
    grow, the service's listener has seen it too (listeners run in order)."""

    def __init__(self, store: MessageStore) -> None:
        self._cond = threading.Condition()
        self._max: dict[tuple[str, int], int] = {}
        store.add_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        with self._cond:
            self._max[(topic, queue_id)] = max_offset
            self._cond.notify_all()

    def wait_for(self, topic: str, queue_id: int, max_offset: int) -> None:
        with self._cond:
            assert self._cond.wait_for(
                lambda: self._max.get((topic, queue_id), 0) >= max_offset, timeout=10
            )


class Answers:
    """Collects callback results; ``wait(n)`` blocks until n answers arrived."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.results: list[tuple[str, PullResult]] = []

    def callback(self, name: str = "") -> Callable[[PullResult], None]:
        def deliver(result: PullResult) -> None:
            with self._cond:
                self.results.append((name, result))
                self._cond.notify_all()

        return deliver

    def wait(self, count: int, timeout_s: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.results) >= count, timeout=timeout_s)

    @property
    def only(self) -> PullResult:
        assert len(self.results) == 1
        return self.results[0][1]


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    yield store
    store.close()


@pytest.fixture
def polling(store: MessageStore) -> Iterator[LongPollingService]:
    """A started service on the real clock."""
    service = LongPollingService(store)
    service.start()
    yield service
    service.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manual(store: MessageStore, clock: FakeClock) -> Iterator[LongPollingService]:
    """A service without its hold thread: the test calls run_once(now_ms)."""
    service = LongPollingService(store, clock_ms=clock)
    yield service
    service.stop()


def msg(tag: str, topic: str = "t", queue_id: int = 0, body: bytes = b"x") -> Message:
    return Message(topic, body, queue_id=queue_id, properties={"TAGS": tag})


# ---- driven by the hold thread ----------------------------------------------------------------


def test_parked_pull_is_answered_when_a_message_arrives(
    store: MessageStore, polling: LongPollingService
) -> None:
    answers = Answers()
    parked = polling.pull_or_park(
        PullRequest("t", 0, 0), time.monotonic_ns() // 10**6 + LONG_TIMEOUT_MS, answers.callback()
    )
    assert parked is not None and polling.parked_count == 1 and answers.results == []
    started = time.monotonic()
    store.put_messages([msg("A", body=b"hello")])
    assert answers.wait(1)
    assert time.monotonic() - started < LONG_TIMEOUT_MS / 1000 / 2
    result = answers.only
    assert result.status is PullStatus.FOUND and [m.body for m in result.messages] == [b"hello"]
    assert result.next_offset == 1 and polling.parked_count == 0


def test_pull_blocking_returns_when_a_message_arrives(
    store: MessageStore, polling: LongPollingService
) -> None:
    box: list[PullResult] = []
    waiter = threading.Thread(
        target=lambda: box.append(
            polling.pull_blocking(PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
    )
    started = time.monotonic()
    waiter.start()
    store.put_messages([msg("A", body=b"late")])
    waiter.join(timeout=LONG_TIMEOUT_MS / 1000)
    assert not waiter.is_alive()
    assert time.monotonic() - started < LONG_TIMEOUT_MS / 1000 / 2
    assert [m.body for m in box[0].messages] == [b"late"]


def test_blocked_pull_is_woken_by_dispatch_itself(store: MessageStore) -> None:
    """No hold thread runs: the blocked caller is woken by dispatch and pulls itself, so
    the answer waits for no other thread and no polling interval; a message its filter
    rejects parks it again, and it still times out on its own."""
    service = LongPollingService(store)  # never started
    parked = DispatchWatcher(store)
    box: list[PullResult] = []
    tag_b = MessageFilter("TAG", "B")
    waiter = threading.Thread(
        target=lambda: box.append(
            service.pull_blocking(PullRequest("t", 0, 0, filter=tag_b), timeout_ms=LONG_TIMEOUT_MS)
        )
    )
    waiter.start()
    deadline = time.monotonic() + 10
    while service.parked_count == 0:
        assert time.monotonic() < deadline, "pull_blocking never parked"
        time.sleep(0.001)
    store.put_messages([msg("A")])  # rejected by the filter: parks again past it
    parked.wait_for("t", 0, 1)
    started = time.monotonic()
    store.put_messages([msg("B", body=b"wanted")])
    waiter.join(timeout=LONG_TIMEOUT_MS / 1000)
    assert not waiter.is_alive()
    assert time.monotonic() - started < LONG_TIMEOUT_MS / 1000 / 2
    assert [m.body for m in box[0].messages] == [b"wanted"] and box[0].next_offset == 2
    assert service.parked_count == 0
    timed = service.pull_blocking(
        PullRequest("t", 0, 2), timeout_ms=50
    )  # no hold thread, still ends
    assert timed.status is PullStatus.NO_NEW_MESSAGE and timed.next_offset == 2
    service.stop()


def test_pull_blocking_answers_at_once_when_messages_exist(
    store: MessageStore, polling: LongPollingService
) -> None:
    store.put_messages([msg("A")])
    assert store.wait_dispatched()
    result = polling.pull_blocking(PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
    assert result.status is PullStatus.FOUND and polling.parked_count == 0


def test_pull_blocking_returns_illegal_offsets_at_once(polling: LongPollingService) -> None:
    result = polling.pull_blocking(PullRequest("t", 0, 5), timeout_ms=LONG_TIMEOUT_MS)
    assert result.status is PullStatus.OFFSET_OVERFLOW_BADLY and result.next_offset == 0


def test_non_matching_messages_do_not_answer_a_filtered_pull(
    store: MessageStore, polling: LongPollingService
) -> None:
    only_a = MessageFilter("TAG", "TagA")
    answers = Answers()
    deadline_ms = time.monotonic_ns() // 10**6 + LONG_TIMEOUT_MS
    polling.pull_or_park(PullRequest("t", 0, 0, filter=only_a), deadline_ms, answers.callback())
    store.put_messages([msg("TagB"), msg("TagC")])
    store.put_messages([msg("TagB"), msg("TagA", body=b"wanted")])
    assert answers.wait(1)
    result = answers.only
    assert [(m.tag, m.body, m.queue_offset) for m in result.messages] == [("TagA", b"wanted", 3)]
    assert result.next_offset == 4


def test_timeout_answers_with_no_new_message(polling: LongPollingService) -> None:
    started = time.monotonic()
    result = polling.pull_blocking(PullRequest("t", 0, 0), timeout_ms=100)
    elapsed_s = time.monotonic() - started
    assert result.status is PullStatus.NO_NEW_MESSAGE and result.messages == []
    assert result.next_offset == 0
    assert 0.09 <= elapsed_s < 2.0


def test_many_timeouts_fire_in_deadline_order(polling: LongPollingService) -> None:
    answers = Answers()
    now_ms = time.monotonic_ns() // 10**6
    for i, timeout_ms in enumerate([150, 50, 100, 20]):
        polling.park(PullRequest("t", i, 0), now_ms + timeout_ms, answers.callback(str(i)))
    assert answers.wait(4, timeout_s=5)
    assert [name for name, _ in answers.results] == ["3", "1", "2", "0"]
    assert all(r.status is PullStatus.NO_NEW_MESSAGE for _, r in answers.results)


def test_many_parked_requests_on_many_queues_are_each_answered_once(
    store: MessageStore, polling: LongPollingService
) -> None:
    queues, per_queue = 16, 8
    answers = Answers()
    deadline_ms = time.monotonic_ns() // 10**6 + LONG_TIMEOUT_MS
    for qid in range(queues):
        for n in range(per_queue):
            flt = MessageFilter("TAG", "even" if n % 2 == 0 else "odd")
            polling.pull_or_park(
                PullRequest("t", qid, 0, filter=flt), deadline_ms, answers.callback(f"{qid}/{n}")
            )
    assert polling.parked_count == queues * per_queue
    for qid in range(queues):
        store.put_messages([msg("even", queue_id=qid), msg("odd", queue_id=qid)])
    assert answers.wait(queues * per_queue)
    polling.stop()  # must not answer anything a second time
    names = Counter(name for name, _ in answers.results)
    assert len(names) == queues * per_queue and set(names.values()) == {1}
    for name, result in answers.results:
        wanted = "even" if int(name.split("/")[1]) % 2 == 0 else "odd"
        assert [m.tag for m in result.messages] == [wanted]
        assert result.messages[0].queue_id == int(name.split("/")[0])


def test_stop_answers_everything_parked(store: MessageStore) -> None:
    service = LongPollingService(store)
    service.start()
    answers = Answers()
    far_ms = time.monotonic_ns() // 10**6 + LONG_TIMEOUT_MS
    for qid in range(5):
        service.park(PullRequest("t", qid, 0), far_ms, answers.callback(str(qid)))
    service.stop()
    assert len(answers.results) == 5 and service.parked_count == 0
    assert all(r.status is PullStatus.NO_NEW_MESSAGE for _, r in answers.results)
    assert service.park(PullRequest("t", 0, 0), far_ms, answers.callback("late")) is None
    assert answers.results[-1][0] == "late"


# ---- asyncio ------------------------------------------------------------------------------------


def test_pull_async_is_answered_when_a_message_arrives(
    store: MessageStore, polling: LongPollingService
) -> None:
    async def scenario() -> tuple[PullResult, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.create_task(
            pull_async(polling, PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
        await asyncio.sleep(0)  # let the task start its first pull
        await loop.run_in_executor(None, store.put_messages, [msg("A", body=b"async")])
        result = await asyncio.wait_for(task, LONG_TIMEOUT_MS / 1000)
        return result, loop.time() - started

    result, elapsed_s = asyncio.run(scenario())
    assert [m.body for m in result.messages] == [b"async"]
    assert elapsed_s < LONG_TIMEOUT_MS / 1000 / 2


def test_pull_async_times_out(polling: LongPollingService) -> None:
    result = asyncio.run(pull_async(polling, PullRequest("t", 0, 0), timeout_ms=100))
    assert result.status is PullStatus.NO_NEW_MESSAGE


def test_many_async_pulls_share_one_loop(store: MessageStore, polling: LongPollingService) -> None:
    async def scenario() -> list[PullResult]:
        pulls = [
            pull_async(polling, PullRequest("t", qid, 0), timeout_ms=LONG_TIMEOUT_MS)
            for qid in range(20)
        ]
        tasks = [asyncio.create_task(p) for p in pulls]
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, store.put_messages, [msg("A", queue_id=qid) for qid in range(20)]
        )
        return await asyncio.wait_for(asyncio.gather(*tasks), LONG_TIMEOUT_MS / 1000)

    results = asyncio.run(scenario())
    assert [r.messages[0].queue_id for r in results] == list(range(20))


def test_cancelled_async_pull_is_unparked(polling: LongPollingService) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(
            pull_async(polling, PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
        async with asyncio.timeout(5):
            while polling.parked_count == 0:  # yields to the loop each turn
                await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert polling.parked_count == 0

    asyncio.run(scenario())


def test_async_pull_cancelled_during_its_first_pull_is_unparked(
    polling: LongPollingService,
) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(
            pull_async(polling, PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
        await asyncio.sleep(0)  # the task is now waiting for its first pull in the executor
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())  # returns after the executor finished and its callbacks ran
    assert polling.parked_count == 0


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
