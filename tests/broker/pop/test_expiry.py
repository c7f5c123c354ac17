"""POP expiry: revive to the retry topic, invisible-time changes, nack, dead letters, the
revive thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker_core.broker.pop.model import PopConfig
from broker_core.broker.pop.receipt import decode_handle
from broker_core.broker.retry import RetryPolicy
from broker_core.errors import StaleReceiptHandleError
from broker_core.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from tests.broker.pop.conftest import INVISIBLE_MS, T0, Broker, S, ns
from tests.store.conftest import make_message


def test_expiry_redelivers_via_retry_topic_keeping_id(broker: Broker) -> None:
    broker.produce([make_message(0)])
    (first,) = broker.receive()
    assert broker.revive_at(INVISIBLE_MS - 1) == 0
    assert broker.revive_at(INVISIBLE_MS) == 1
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", first.receipt_handle)
    (again,) = broker.receive()
    assert again.delivery_attempt == 2
    assert again.message_id == first.message_id == "ID0000000000"
    assert again.topic == "orders" and again.message.topic == "%RETRY%g"
    assert again.message.body == first.message.body
    props = again.message.properties
    assert props[PROPERTY_RETRY_TOPIC] == "orders"
    assert props[PROPERTY_ORIGIN_MESSAGE_ID] == "ID0000000000"
    assert again.message.reconsume_times == 1
    assert broker.pop.consume_offset("g", "orders", 0) == 1  # the original is resolved
    broker.pop.ack("g", "orders", again.receipt_handle)
    assert broker.pop.consume_offset("g", "%RETRY%g", 0) == 1
    assert broker.revive_at(10 * INVISIBLE_MS) == 0 and broker.receive() == []


def test_change_invisible_duration_extends_and_stales_old_handle(broker: Broker) -> None:
    broker.produce([make_message(0)])
    (got,) = broker.receive()
    broker.clock.advance(10 * S)
    newer = broker.pop.change_invisible_duration("g", "orders", got.receipt_handle, 60 * S)
    assert decode_handle(newer).deadline_ms == T0 + 70 * S
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", got.receipt_handle)
    assert broker.revive_at(INVISIBLE_MS) == 0  # the old deadline no longer applies
    assert broker.receive() == []
    assert broker.revive_at(70 * S - 1) == 0
    newest = broker.pop.change_invisible_duration("g", "orders", newer, 5 * S)
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", newer)
    assert broker.revive_at(75 * S) == 1
    (again,) = broker.receive()
    assert again.delivery_attempt == 2
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", newest)


def test_retries_exhausted_go_to_dlq(broker: Broker) -> None:
    broker.policies["g"] = RetryPolicy(max_retries=2)
    broker.produce([make_message(0)])
    attempts = []
    for round_ in range(3):
        (got,) = broker.receive()
        attempts.append(got.delivery_attempt)
        assert broker.revive_at((round_ + 1) * INVISIBLE_MS) == 1
    assert attempts == [1, 2, 3]
    assert broker.receive() == []
    assert broker.revive_at(100 * INVISIBLE_MS) == 0 and broker.receive() == []
    (dead,) = broker.topic_messages("%DLQ%g")
    assert dead.message_id == "ID0000000000"
    assert dead.properties[PROPERTY_RETRY_TOPIC] == "orders"
    assert dead.reconsume_times == 3 and dead.body.startswith(b"message-0|")
    assert len(broker.topic_messages("%RETRY%g")) == 2
    assert broker.pop.inflight_count() == 0


def test_nack_uses_backoff_then_dlq(broker: Broker) -> None:
    broker.policies["g"] = RetryPolicy.custom([5 * S, 7 * S], max_retries=1)
    broker.produce([make_message(0)])
    (got,) = broker.receive()
    broker.pop.nack("g", "orders", got.receipt_handle)
    assert broker.revive_at(5 * S - 1) == 0
    assert broker.revive_at(5 * S) == 1
    (again,) = broker.receive()
    assert again.delivery_attempt == 2
    broker.pop.nack("g", "orders", again.receipt_handle)  # retries used up: DLQ at once
    assert [m.message_id for m in broker.topic_messages("%DLQ%g")] == ["ID0000000000"]
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.ack("g", "orders", again.receipt_handle)


def test_nack_with_explicit_delay_and_forward_to_dlq(broker: Broker) -> None:
    broker.produce([make_message(0), make_message(1)])
    first, second = broker.receive()
    broker.pop.nack("g", "orders", first.receipt_handle, delay_ms=2 * S)
    broker.pop.forward_to_dlq("g", "orders", second.receipt_handle)
    (dead,) = broker.topic_messages("%DLQ%g")
    assert dead.message_id == second.message_id and dead.reconsume_times == 1
    with pytest.raises(StaleReceiptHandleError):
        broker.pop.forward_to_dlq("g", "orders", second.receipt_handle)
    assert broker.revive_at(2 * S) == 1
    assert ns(broker.receive()) == [0]
    assert broker.pop.consume_offset("g", "orders", 0) == 2


def test_retry_copy_from_retry_topic_can_be_acked_with_either_topic(broker: Broker) -> None:
    broker.produce([make_message(0)])
    broker.receive()
    broker.revive_at(INVISIBLE_MS)
    (again,) = broker.receive()
    assert decode_handle(again.receipt_handle).topic == "%RETRY%g"
    broker.pop.ack("g", "%RETRY%g", again.receipt_handle)
    assert broker.pop.inflight_count() == 0


def test_revive_thread_runs_in_background(tmp_path: Path) -> None:
    b = Broker(tmp_path, PopConfig(revive_interval_ms=5))
    try:
        assert b.store is not None
        revived = threading.Event()
        b.store.add_dispatch_listener(
            lambda topic, _qid, _max: revived.set() if topic == "%RETRY%g" else None
        )
        b.produce([make_message(0)])
        b.receive()
        b.clock.advance(INVISIBLE_MS)
        b.pop.start()
        assert revived.wait(5)
        b.pop.stop()
        assert b.pop.inflight_count() == 0 and b.pop.failure is None
    finally:
        b.close()
