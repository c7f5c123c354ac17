"""Check-back of forgotten halves: timeouts, immunity, retries, roll-back after the last
check, checker errors, progress, and the check thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker_core.broker.system_topics import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from broker_core.broker.transaction.check import PROPERTY_CHECK_IMMUNITY_S
from broker_core.broker.transaction.transaction import CheckRequest, CheckRound, Resolution
from broker_core.errors import MessageNotFoundError
from broker_core.message import PROPERTY_CHECK_TIMES
from tests.broker.transaction.conftest import GROUP, REAL, T0, TIMEOUT_MS, Broker
from tests.store.conftest import make_message


def test_check_back_after_the_timeout_and_commit_from_check(broker: Broker) -> None:
    p = broker.prepare(1)
    assert broker.checks(T0 + TIMEOUT_MS - 1).checked == []
    round_ = broker.checks(T0 + TIMEOUT_MS)
    [request] = round_.checked
    assert broker.requests == [request]
    assert (
        request.producer_group,
        request.transaction_id,
        request.message_id,
        request.check_times,
    ) == (GROUP, "tx-1", p.message_id, 1)
    assert request.half.topic == TRANS_HALF_TOPIC
    assert request.half.properties[PROPERTY_CHECK_TIMES] == "1"
    assert broker.real() == []
    result = broker.tx.end(
        request.message_id, request.transaction_id, Resolution.COMMIT, from_check=True
    )
    assert result.from_check
    [got] = broker.real()
    assert got.message_id == p.message_id and PROPERTY_CHECK_TIMES not in got.properties
    assert broker.checks(T0 + 100 * TIMEOUT_MS).checked == []


def test_checker_may_answer_inline(broker: Broker) -> None:
    def commit(request: CheckRequest) -> None:
        broker.tx.end(
            request.message_id, request.transaction_id, Resolution.COMMIT, from_check=True
        )

    broker.answer = commit
    p = [broker.prepare(i) for i in range(3)]
    round_ = broker.checks(T0 + TIMEOUT_MS)
    assert [r.message_id for r in round_.checked] == [x.message_id for x in p]
    assert sorted(m.message_id for m in broker.real()) == [x.message_id for x in p]
    assert broker.tx.stats().unresolved == 0


def test_immunity_property_delays_the_first_check(broker: Broker) -> None:
    msg = make_message(1, topic=REAL)
    msg.properties[PROPERTY_CHECK_IMMUNITY_S] = "60"
    broker.tx.prepare(msg, GROUP, "tx-1")
    assert broker.checks(T0 + 59_999).checked == []
    assert len(broker.checks(T0 + 60_000).checked) == 1
    assert broker.checks(T0 + 60_000 + TIMEOUT_MS - 1).checked == []
    assert len(broker.checks(T0 + 60_000 + TIMEOUT_MS).checked) == 1


def test_unanswered_checks_retry_then_roll_back(broker: Broker) -> None:
    p = broker.prepare(1)
    now = T0
    for n in range(1, 16):
        now += TIMEOUT_MS
        [request] = broker.checks(now).checked
        assert request.check_times == n
        assert request.half.properties[PROPERTY_CHECK_TIMES] == str(n)
    now += TIMEOUT_MS
    round_ = broker.checks(now)
    assert (round_.checked, round_.rolled_back) == ([], [p.message_id])
    assert broker.real() == []
    with pytest.raises(MessageNotFoundError, match="rolled back"):
        broker.end(p, Resolution.COMMIT)
    assert broker.checks(now + 100 * TIMEOUT_MS) == CheckRound([], [], [], round_.half_progress)
    assert round_.half_progress == broker.store.max_offset(TRANS_HALF_TOPIC, 0) == 16


def test_max_check_times_is_configurable(tmp_path: Path) -> None:
    b = Broker(tmp_path, max_check_times=2, check_timeout_ms=1_000)
    p = b.prepare(1)
    assert len(b.checks(T0 + 1_000).checked) == 1
    assert len(b.checks(T0 + 2_000).checked) == 1
    assert b.checks(T0 + 3_000).rolled_back == [p.message_id]
    b.close()


def test_checker_error_is_reported_and_retried(broker: Broker) -> None:
    def offline(request: CheckRequest) -> None:
        raise MessageNotFoundError(f"no producer of {request.producer_group} online")

    broker.answer = offline
    p = broker.prepare(1)
    round_ = broker.checks(T0 + TIMEOUT_MS)
    assert round_.failed == [p.message_id]
    broker.answer = None
    assert [r.check_times for r in broker.checks(T0 + 2 * TIMEOUT_MS).checked] == [2]


def test_progress_only_passes_finished_halves(broker: Broker) -> None:
    p = [broker.prepare(i) for i in range(4)]

    def progress() -> int | None:
        return broker.offsets.query(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0)

    broker.end(p[1], Resolution.COMMIT)
    broker.end(p[3], Resolution.ROLLBACK)
    assert progress() == 0
    broker.end(p[0], Resolution.COMMIT)
    assert progress() == 2
    round_ = broker.checks(T0 + TIMEOUT_MS)  # p[2] re-put at offset 4: the original is finished
    assert [r.half.queue_offset for r in round_.checked] == [4]
    assert progress() == round_.half_progress == 4
    broker.end(p[2], Resolution.COMMIT)
    assert progress() == 5


# --------------------------------------------------------------------------- the thread


def test_check_thread_runs_rounds_until_stopped(tmp_path: Path) -> None:
    b = Broker(tmp_path, check_interval_ms=5)
    answered = threading.Event()

    def commit(request: CheckRequest) -> None:
        b.tx.end(request.message_id, request.transaction_id, Resolution.COMMIT, from_check=True)
        answered.set()

    b.answer = commit
    p = b.prepare(1)
    b.now_ms = T0 + TIMEOUT_MS
    b.tx.start()
    b.tx.start()  # a second start is a no-op
    assert answered.wait(5)
    b.tx.stop()
    assert b.tx.failure is None
    assert [m.message_id for m in b.real()] == [p.message_id]
    assert b.offsets.query(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 2
    b.close()
    assert (tmp_path / "config" / "consumerOffset.json").exists()
