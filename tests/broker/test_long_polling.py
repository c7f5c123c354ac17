"""Long polling driven by the hold thread: parked pulls answered by dispatch, timeouts, stop."""

from __future__ import annotations

import threading
import time
from collections import Counter

from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore
from tests.broker.conftest import LONG_TIMEOUT_MS, Answers, DispatchWatcher, msg

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
