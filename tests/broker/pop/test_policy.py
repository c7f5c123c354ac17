"""The pure parts of POP: the revive decision table, original topics, revive copies and the
revive-log record codec."""

from __future__ import annotations

import pytest

from broker_core.broker.pop.log import PopRecord, RecordKind
from broker_core.broker.pop.policy import Destination, original_topic, revive_copy, revive_decision
from broker_core.broker.retry import RetryPolicy
from broker_core.errors import CorruptionError, InvalidArgumentError
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)
from broker_core.protocol.unit import SYSFLAG_TRANSACTION_COMMIT
from tests.broker.pop.conftest import T0


@pytest.mark.parametrize(
    "fifo, max_retries, attempt, destination, topic",
    [
        (False, 16, 1, Destination.RETRY, "%RETRY%g"),
        (False, 16, 16, Destination.RETRY, "%RETRY%g"),
        (False, 16, 17, Destination.DLQ, "%DLQ%g"),
        (False, 0, 1, Destination.DLQ, "%DLQ%g"),
        (False, 2, 2, Destination.RETRY, "%RETRY%g"),
        (False, 2, 3, Destination.DLQ, "%DLQ%g"),
        (True, 16, 1, Destination.IN_PLACE, "orders"),
        (True, 2, 2, Destination.IN_PLACE, "orders"),
        (True, 2, 3, Destination.DLQ, "%DLQ%g"),
        (True, 0, 1, Destination.DLQ, "%DLQ%g"),
    ],
)
def test_revive_decision_table(fifo, max_retries, attempt, destination, topic) -> None:
    decision = revive_decision(
        "g", "orders", attempt, RetryPolicy(max_retries=max_retries), fifo=fifo, now_ms=T0
    )
    assert (decision.destination, decision.topic, decision.reconsume_times) == (
        destination,
        topic,
        attempt,
    )


def test_revive_decision_rejects_attempt_zero() -> None:
    with pytest.raises(InvalidArgumentError):
        revive_decision("g", "orders", 0, RetryPolicy(), fifo=False, now_ms=T0)


def _stored(topic: str, props: dict[str, str], sys_flag: int = 0) -> StoredMessage:
    return StoredMessage(
        topic,
        0,
        7,
        4096,
        b"body",
        props,
        3,
        sys_flag,
        T0,
        ("10.0.0.1", 9),
        T0,
        ("127.0.0.1", 8081),
        0,
        0,
        0,
        100,
    )


@pytest.mark.parametrize(
    "topic, props, expected",
    [
        ("orders", {}, "orders"),
        ("orders", {PROPERTY_RETRY_TOPIC: "other"}, "orders"),
        ("%RETRY%g", {PROPERTY_RETRY_TOPIC: "orders"}, "orders"),
        ("%DLQ%g", {PROPERTY_RETRY_TOPIC: "orders"}, "orders"),
        ("%RETRY%g", {}, "%RETRY%g"),
    ],
)
def test_original_topic_table(topic: str, props: dict[str, str], expected: str) -> None:
    assert original_topic(_stored(topic, props)) == expected


def test_revive_copy_keeps_identity_and_drops_delay() -> None:
    src = _stored("orders", {PROPERTY_DELAY_LEVEL: "3", "k": "v"}, SYSFLAG_TRANSACTION_COMMIT)
    copy = revive_copy(src, "%RETRY%g", 2)
    assert copy.topic == "%RETRY%g" and copy.queue_id == 0 and copy.reconsume_times == 2
    assert copy.properties[PROPERTY_UNIQ_KEY] == src.message_id  # the offset id becomes it
    assert copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == src.message_id
    assert copy.properties[PROPERTY_RETRY_TOPIC] == "orders"
    assert PROPERTY_DELAY_LEVEL not in copy.properties and copy.properties["k"] == "v"
    assert copy.sys_flag == 0 and copy.flag == 3 and copy.body == b"body"
    again = revive_copy(_stored("%RETRY%g", copy.properties), "%DLQ%g", 3)
    assert again.properties[PROPERTY_UNIQ_KEY] == src.message_id
    assert again.properties[PROPERTY_RETRY_TOPIC] == "orders"


CHECKPOINT = PopRecord(
    RecordKind.CHECKPOINT,
    "g",
    "orders",
    3,
    17,
    anchor=5,
    time_ms=T0,
    invisible_ms=30_000,
    attempt=2,
    message_group="A",
)


@pytest.mark.parametrize(
    "record",
    [
        CHECKPOINT,
        PopRecord(RecordKind.ACK, "g", "%RETRY%g", 0, 1, resolves=9, time_ms=T0),
        PopRecord(RecordKind.DEAD_LETTERED, "组", "订单", 1, 2, resolves=3, message_group="组"),
    ],
)
def test_pop_record_round_trip(record: PopRecord) -> None:
    assert PopRecord.decode(record.encode()) == record


@pytest.mark.parametrize("cut", [0, 10, 50, 52])
def test_pop_record_corruption_is_an_error(cut: int) -> None:
    raw = PopRecord(RecordKind.ACK, "g", "orders", 0, 1, resolves=2).encode()
    with pytest.raises(CorruptionError, match="revive offset 7"):
        PopRecord.decode(raw[:cut], 7)
    with pytest.raises(CorruptionError):
        PopRecord.decode(raw + b"x")
    with pytest.raises(CorruptionError):
        PopRecord.decode(b"\x09" + raw[1:])
