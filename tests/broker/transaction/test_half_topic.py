"""Whose half message is it: ``TransactionService.half_topic`` (what a 4.x END_TRANSACTION
is authorised against) and ``end(topic=...)`` (the gRPC EndTransaction's topic)."""

from __future__ import annotations

import pytest

from broker_core.broker.transaction.transaction import Resolution
from broker_core.errors import CorruptionError, MessageNotFoundError
from tests.broker.transaction.conftest import GROUP, REAL, T0, Broker
from tests.store.conftest import make_message


def test_half_topic_by_the_original_record_or_its_check_back_copy(broker: Broker) -> None:
    p = broker.prepare(1)
    assert broker.tx.half_topic(p.physical_offset, p.message_id) == REAL
    broker.checks(T0 + 10**6)  # past the check timeout: re-put as a copy, producer asked
    [request] = broker.requests
    copy_offset = request.half.physical_offset
    assert copy_offset != p.physical_offset
    assert broker.tx.half_topic(copy_offset, p.message_id) == REAL
    assert broker.tx.half_topic(p.physical_offset, p.message_id) == REAL  # a late producer


def test_offsets_that_hold_no_half_record_of_the_message_are_not_found(broker: Broker) -> None:
    p = broker.prepare(1)
    other = broker.prepare(2)
    plain = broker.store.put_message(make_message(1, topic=REAL))  # same UNIQ_KEY, not a half
    end_of_log = broker.store.commitlog.max_offset
    offsets = (p.physical_offset + 1, -1, end_of_log, 10**12, other.physical_offset)
    for offset in (*offsets, plain.physical_offset):
        with pytest.raises(MessageNotFoundError, match=f"no half message {p.message_id} at"):
            broker.tx.half_topic(offset, p.message_id)
    with pytest.raises(MessageNotFoundError, match="no unresolved half message NOPE"):
        broker.tx.half_topic(p.physical_offset, "NOPE")
    broker.end(p, Resolution.ROLLBACK)
    with pytest.raises(MessageNotFoundError, match="already rolled back"):
        broker.tx.half_topic(p.physical_offset, p.message_id)


def test_an_old_record_of_a_reused_id_in_another_topic_does_not_pass(broker: Broker) -> None:
    old = broker.tx.prepare(make_message(1, topic="orders"), GROUP, "tx-a")
    broker.tx.end(old.message_id, "tx-a", Resolution.COMMIT, from_check=False)
    new = broker.tx.prepare(make_message(1, topic="payments"), GROUP, "tx-b")
    assert new.message_id == old.message_id
    with pytest.raises(MessageNotFoundError, match="at commitlog offset"):
        broker.tx.half_topic(old.physical_offset, old.message_id)
    assert broker.tx.half_topic(new.physical_offset, new.message_id) == "payments"


def test_end_naming_another_topic_is_not_found_and_ends_nothing(broker: Broker) -> None:
    p = broker.prepare(1)
    for tx_id in (p.transaction_id, "not-its-tx"):  # the topic is checked first: no leak
        with pytest.raises(MessageNotFoundError, match=f"{p.message_id} in topic elsewhere"):
            broker.tx.end(
                p.message_id, tx_id, Resolution.COMMIT, from_check=False, topic="elsewhere"
            )
    assert broker.real() == []
    assert broker.tx.stats().unresolved == 1
    broker.tx.end(p.message_id, p.transaction_id, Resolution.COMMIT, from_check=False, topic=REAL)
    assert [m.message_id for m in broker.real()] == [p.message_id]


def test_a_named_offset_never_reads_more_than_one_units_largest_size(broker: Broker) -> None:
    p = broker.prepare(1)
    with pytest.raises(CorruptionError, match="bad unit size"):
        broker.store.read_message(p.physical_offset, max_size_bytes=16)
    assert broker.store.read_message(p.physical_offset, max_size_bytes=1 << 20).topic
