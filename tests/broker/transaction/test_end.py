"""Transactions end to end over a real store: prepare, commit, rollback and refused ends."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker_core.broker.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.broker.transaction.transaction import PrepareResult, Resolution
from broker_core.errors import InvalidArgumentError, MessageNotFoundError, StoreClosedError
from broker_core.message import (
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
)
from broker_core.protocol.unit import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK
from tests.broker.transaction.conftest import (
    GROUP,
    REAL,
    T0,
    TIMEOUT_MS,
    TRANSACTION_PROPS,
    Broker,
    read_queue,
)
from tests.store.conftest import make_message

ROLLBACK = Resolution.ROLLBACK


def test_commit_delivers_exactly_once_with_properties_intact(broker: Broker) -> None:
    msg = make_message(1, topic=REAL, queue_id=0)
    msg.properties[PROPERTY_DELIVER_TIME_MS] = str(T0 + 1)
    p = broker.tx.prepare(msg, GROUP, "tx-1")
    assert p.message_id == "ID0000000001"
    result = broker.tx.end(p.message_id, "tx-1", Resolution.COMMIT, from_check=False)
    assert result.delivered is not None and result.delivered.message_id == p.message_id
    [got] = broker.real()
    assert (got.body, got.message_id, got.tag, got.keys) == (
        msg.body,
        p.message_id,
        "odd",
        ["key-1"],
    )
    assert got.properties["n"] == "1"
    assert got.properties[PROPERTY_DELIVER_TIME_MS] == str(T0 + 1)
    assert got.properties[PROPERTY_TRANSACTION_ID] == "tx-1"
    assert not set(TRANSACTION_PROPS) & set(got.properties)
    assert got.prepared_transaction_offset == p.physical_offset
    assert got.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    [op] = read_queue(broker.store, TRANS_OP_HALF_TOPIC)
    assert (op.body, op.tag) == (str(p.queue_offset).encode(), "d")


def test_half_is_invisible_in_the_real_topic_before_commit(broker: Broker) -> None:
    p = broker.prepare(1)
    assert broker.real() == []
    [half] = read_queue(broker.store, TRANS_HALF_TOPIC)
    assert (half.queue_offset, half.physical_offset) == (p.queue_offset, p.physical_offset)
    assert half.properties[PROPERTY_REAL_TOPIC] == REAL
    assert broker.store.query_by_id(p.message_id).topic == TRANS_HALF_TOPIC
    broker.end(p, Resolution.COMMIT)
    assert [m.message_id for m in broker.real()] == [p.message_id]


def test_rollback_delivers_nothing_and_records_the_op(broker: Broker) -> None:
    p = broker.prepare(1)
    result = broker.tx.end(p.message_id, p.transaction_id, Resolution.ROLLBACK, from_check=False)
    assert result.delivered is None
    assert broker.real() == []
    [op] = read_queue(broker.store, TRANS_OP_HALF_TOPIC)
    assert (op.body, op.tag) == (str(p.queue_offset).encode(), "d")
    assert broker.tx.stats().unresolved == 0


@pytest.mark.parametrize("first", list(Resolution))
@pytest.mark.parametrize("second", list(Resolution))
def test_second_end_raises_and_delivers_nothing(
    broker: Broker, first: Resolution, second: Resolution
) -> None:
    p = broker.prepare(1)
    broker.end(p, first)
    with pytest.raises(MessageNotFoundError, match="already"):
        broker.end(p, second)
    assert len(broker.real()) == (1 if first is Resolution.COMMIT else 0)
    assert len(read_queue(broker.store, TRANS_OP_HALF_TOPIC)) == 1


def test_unknown_id_and_wrong_transaction_are_refused(broker: Broker) -> None:
    with pytest.raises(MessageNotFoundError, match="unknown"):
        broker.tx.end("NOPE", "tx-1", Resolution.COMMIT, from_check=False)
    p = broker.prepare(1)
    with pytest.raises(InvalidArgumentError, match="transaction"):
        broker.tx.end(p.message_id, "tx-other", Resolution.COMMIT, from_check=False)
    broker.end(p, Resolution.COMMIT)
    assert len(broker.real()) == 1


def test_bad_resolution_is_refused(broker: Broker) -> None:
    p = broker.prepare(1)
    with pytest.raises(InvalidArgumentError, match="resolution"):
        broker.tx.end(p.message_id, p.transaction_id, "maybe", from_check=False)  # type: ignore[arg-type]
    broker.end(p, Resolution("rollback"))
    assert broker.real() == []


def test_prepare_is_idempotent_for_the_same_id(broker: Broker) -> None:
    first = broker.prepare(1)
    assert broker.prepare(1) == first
    with pytest.raises(InvalidArgumentError):
        broker.tx.prepare(make_message(1, topic=REAL), GROUP, "tx-other")
    assert len(read_queue(broker.store, TRANS_HALF_TOPIC)) == 1
    broker.end(first, Resolution.COMMIT)
    second = broker.prepare(1)  # a reused id after the end is a new transaction
    assert second.queue_offset == first.queue_offset + 1


def test_failed_end_leaves_the_half_unresolved(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = b.prepare(1)
    b.store.close()  # every write now fails
    with pytest.raises(StoreClosedError):
        b.end(p, Resolution.ROLLBACK)
    assert b.tx.stats().unresolved == 1
    b.open()
    b.end(p, Resolution.COMMIT)
    assert [m.message_id for m in b.real()] == [p.message_id]
    b.close()


def test_a_commit_racing_a_check_back_rollback_of_the_same_half_ends_it_once(
    broker: Broker,
) -> None:
    """The producer's COMMIT and the ROLLBACK answering a check-back of the same half
    arrive at once (two threads, started together): one ends the half, the other is
    told it already ended; the real topic holds exactly the halves whose commit won."""
    halves = [broker.prepare(i) for i in range(1, 61)]
    checked = broker.checks(T0 + TIMEOUT_MS + 1)
    assert {r.message_id for r in broker.requests} == {p.message_id for p in halves}, checked
    ops_before = len(read_queue(broker.store, TRANS_OP_HALF_TOPIC))  # the check round's
    outcomes: dict[tuple[str, Resolution], str] = {}

    def end(p: PrepareResult, resolution: Resolution, gate: threading.Barrier) -> None:
        gate.wait()
        try:
            broker.tx.end(
                p.message_id, p.transaction_id, resolution, from_check=resolution is ROLLBACK
            )
            outcomes[p.message_id, resolution] = "ended"
        except MessageNotFoundError as exc:
            outcomes[p.message_id, resolution] = str(exc)

    threads = []
    for p in halves:
        gate = threading.Barrier(2)
        threads += [
            threading.Thread(target=end, args=(p, resolution, gate))
            for resolution in (Resolution.COMMIT, ROLLBACK)
        ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    committed = []
    for p in halves:
        commit, rollback = (
            outcomes[p.message_id, Resolution.COMMIT],
            outcomes[p.message_id, ROLLBACK],
        )
        assert sorted((commit, rollback)) in (
            ["ended", f"half message {p.message_id} was already committed"],
            ["ended", f"half message {p.message_id} was already rolled back"],
        ), (commit, rollback)
        if commit == "ended":
            committed.append(p.message_id)
    assert sorted(m.message_id for m in broker.real()) == sorted(committed)
    ops = len(read_queue(broker.store, TRANS_OP_HALF_TOPIC)) - ops_before
    assert ops == len(halves)  # one end each
    assert broker.checks(T0 + 10 * TIMEOUT_MS).checked == []  # nothing left unresolved
