"""The transaction service across restarts: nothing lost or duplicated, progress re-derived,
torn re-checks and malformed halves recovered, memory bounded by the progress."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from broker_core.broker.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.broker.transaction.records import recheck_message
from broker_core.broker.transaction.transaction import CheckRound, Resolution
from broker_core.errors import MessageNotFoundError
from broker_core.message import Message
from tests.broker.transaction.conftest import T0, TIMEOUT_MS, Broker, read_queue


def test_restart_mid_flow_loses_and_duplicates_nothing(broker: Broker) -> None:
    p = [broker.prepare(i) for i in range(6)]
    broker.end(p[0], Resolution.COMMIT)
    broker.end(p[1], Resolution.ROLLBACK)
    round_ = broker.checks(T0 + TIMEOUT_MS)
    assert [r.message_id for r in round_.checked] == [x.message_id for x in p[2:]]
    broker.end(p[3], Resolution.COMMIT, from_check=True)

    broker.restart()
    assert broker.tx.stats().unresolved == 3
    with pytest.raises(MessageNotFoundError):
        broker.end(p[0], Resolution.COMMIT)  # committed before the restart
    broker.end(p[2], Resolution.COMMIT)  # still committable after the restart
    broker.requests.clear()
    assert broker.checks(T0 + 2 * TIMEOUT_MS - 1).checked == []
    round_ = broker.checks(T0 + 2 * TIMEOUT_MS)
    assert [(r.message_id, r.check_times) for r in round_.checked] == [
        (p[4].message_id, 2),
        (p[5].message_id, 2),
    ]
    broker.end(p[4], Resolution.COMMIT, from_check=True)
    broker.end(p[5], Resolution.ROLLBACK, from_check=True)

    broker.restart()
    assert broker.checks(T0 + 1000 * TIMEOUT_MS) == CheckRound(
        [], [], [], broker.tx.stats().half_progress
    )
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.finished_held) == (0, 0)
    assert stats.half_progress == broker.store.max_offset(TRANS_HALF_TOPIC, 0)
    delivered = Counter(m.message_id for m in broker.real())
    assert delivered == Counter(p[i].message_id for i in (0, 3, 2, 4))


def test_restart_without_persisted_progress_rederives_everything(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = [b.prepare(i) for i in range(3)]
    b.end(p[0], Resolution.COMMIT)
    b.end(p[1], Resolution.ROLLBACK)
    b.store.close()  # the service is never stopped: no progress file
    assert not (tmp_path / "config" / "consumerOffset.json").exists()
    b.open()
    assert b.tx.stats().unresolved == 1
    [request] = b.checks(T0 + TIMEOUT_MS).checked
    assert request.message_id == p[2].message_id
    b.end(p[2], Resolution.COMMIT, from_check=True)
    assert sorted(m.message_id for m in b.real()) == [p[0].message_id, p[2].message_id]
    b.close()


def test_recovery_retires_a_copy_left_by_a_torn_recheck(broker: Broker) -> None:
    p = broker.prepare(1)
    [half] = read_queue(broker.store, TRANS_HALF_TOPIC)
    broker.store.put_message(recheck_message(half, T0 + 10))  # the copy; its op record is lost
    broker.restart()
    assert broker.tx.stats().unresolved == 1
    [op] = read_queue(broker.store, TRANS_OP_HALF_TOPIC)
    assert op.body == str(p.queue_offset).encode()
    [request] = broker.checks(T0 + 10 + TIMEOUT_MS).checked
    assert request.check_times == 2
    broker.end(p, Resolution.COMMIT, from_check=True)
    assert [m.message_id for m in broker.real()] == [p.message_id]
    assert broker.checks(T0 + 1000 * TIMEOUT_MS).checked == []


def test_recovery_rolls_back_a_malformed_half(broker: Broker) -> None:
    broker.store.put_message(Message(TRANS_HALF_TOPIC, b"junk", properties={"a": "b"}))
    good = broker.prepare(1)
    broker.restart()
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.half_progress) == (1, 1)
    broker.end(good, Resolution.COMMIT)
    assert broker.tx.stats().half_progress == 2


def test_memory_holds_only_op_records_at_or_above_progress(broker: Broker) -> None:
    for i in range(20):
        broker.end(broker.prepare(i), Resolution.COMMIT)
    stats = broker.tx.stats()
    assert (stats.finished_held, stats.half_progress, stats.op_progress) == (0, 20, 20)
    stuck = broker.prepare(20)
    for i in range(21, 26):
        broker.end(broker.prepare(i), Resolution.ROLLBACK)
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.finished_held, stats.half_progress, stats.op_progress) == (
        1,
        5,
        20,
        20,
    )

    broker.restart()  # the 20 op records below the progress are not read back
    assert broker.tx.stats() == stats
    broker.end(stuck, Resolution.COMMIT)
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.finished_held, stats.half_progress, stats.op_progress) == (
        0,
        0,
        26,
        26,
    )
    broker.restart()
    assert broker.tx.stats() == stats
    assert [m.message_id for m in broker.real()] == [f"ID{i:010d}" for i in range(21)]
