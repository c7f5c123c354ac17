"""Tests for broker_core.broker.transaction.records: half records, real messages, re-put
copies and op records."""

from __future__ import annotations

import pytest

from broker_core.broker.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.broker.transaction.records import (
    half_message,
    op_message,
    parse_op_body,
    real_message,
    recheck_message,
)
from broker_core.errors import InvalidArgumentError, InvalidGroupError, InvalidTopicError
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
)
from broker_core.protocol.properties import PROPERTY_CHECK_BASE_MS
from broker_core.protocol.unit import (
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NONE,
    SYSFLAG_TRANSACTION_PREPARED,
)
from tests.broker.transaction.conftest import GROUP, REAL, T0, half_props, stored
from tests.store.conftest import make_message


def test_half_message_hides_the_real_destination() -> None:
    msg = make_message(1, topic=REAL, queue_id=3)
    msg.sys_flag = SYSFLAG_TRANSACTION_PREPARED
    original = dict(msg.properties)
    half = half_message(msg, GROUP, "tx-1", T0)
    assert (half.topic, half.queue_id, half.body) == (TRANS_HALF_TOPIC, 0, msg.body)
    assert half.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_NONE
    assert half.properties == original | {
        PROPERTY_REAL_TOPIC: REAL,
        PROPERTY_REAL_QUEUE_ID: "3",
        PROPERTY_TRANSACTION_PREPARED: "true",
        PROPERTY_PRODUCER_GROUP: GROUP,
        PROPERTY_TRANSACTION_ID: "tx-1",
        PROPERTY_CHECK_BASE_MS: str(T0),
    }
    assert msg.properties == original  # the input is not modified


def test_half_message_gives_an_id_when_missing() -> None:
    half = half_message(Message(REAL, b"x"), GROUP, "tx-1", T0)
    assert len(half.properties[PROPERTY_UNIQ_KEY]) == 34


@pytest.mark.parametrize(
    ("topic", "group", "tx_id", "queue_id", "error"),
    [
        ("bad topic", GROUP, "tx", 0, InvalidTopicError),
        (TRANS_HALF_TOPIC, GROUP, "tx", 0, InvalidTopicError),
        ("rmq_sys_anything", GROUP, "tx", 0, InvalidTopicError),
        (REAL, "", "tx", 0, InvalidGroupError),
        (REAL, "bad group", "tx", 0, InvalidGroupError),
        (REAL, GROUP, "", 0, InvalidArgumentError),
        (REAL, GROUP, "tx", -1, InvalidArgumentError),
    ],
)
def test_half_message_rejects(
    topic: str, group: str, tx_id: str, queue_id: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        half_message(Message(topic, b"x", queue_id=queue_id), group, tx_id, T0)


def test_real_message_restores_destination_and_user_properties() -> None:
    props = half_props(
        **{
            PROPERTY_REAL_TOPIC: REAL,
            PROPERTY_REAL_QUEUE_ID: "2",
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_CHECK_TIMES: "4",
            "TAGS": "t",
            "KEYS": "k1 k2",
            "user": "v",
            PROPERTY_DELIVER_TIME_MS: str(T0 + 60_000),
        }
    )
    msg = real_message(stored(props, physical_offset=8192))
    assert (msg.topic, msg.queue_id, msg.body, msg.flag) == (REAL, 2, b"body", 7)
    assert msg.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    assert msg.prepared_transaction_offset == 8192
    assert (msg.born_timestamp_ms, msg.born_host, msg.reconsume_times) == (
        T0 - 5,
        ("10.0.0.1", 5555),
        2,
    )
    assert msg.properties == {
        PROPERTY_UNIQ_KEY: "ID1",
        PROPERTY_TRANSACTION_ID: "tx-1",
        PROPERTY_PRODUCER_GROUP: GROUP,
        "TAGS": "t",
        "KEYS": "k1 k2",
        "user": "v",
        PROPERTY_DELIVER_TIME_MS: str(T0 + 60_000),
    }


@pytest.mark.parametrize(
    "missing",
    [
        {PROPERTY_REAL_QUEUE_ID: "0"},
        {PROPERTY_REAL_TOPIC: REAL},
        {PROPERTY_REAL_TOPIC: REAL, PROPERTY_REAL_QUEUE_ID: "x"},
    ],
)
def test_real_message_without_destination_raises(missing: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        real_message(stored(half_props(**missing)))


@pytest.mark.parametrize(("before", "after"), [(None, "1"), ("1", "2"), ("14", "15")])
def test_recheck_message_counts_checks(before: str | None, after: str) -> None:
    props = half_props() if before is None else half_props(**{PROPERTY_CHECK_TIMES: before})
    copy = recheck_message(stored(props), T0 + 99)
    assert (copy.topic, copy.queue_id, copy.body) == (TRANS_HALF_TOPIC, 0, b"body")
    assert copy.properties[PROPERTY_CHECK_TIMES] == after
    assert copy.properties[PROPERTY_CHECK_BASE_MS] == str(T0 + 99)


def test_op_message() -> None:
    op = op_message(42, T0)
    assert (op.topic, op.queue_id, op.body, op.tag) == (TRANS_OP_HALF_TOPIC, 0, b"42", "d")
    with pytest.raises(InvalidArgumentError):
        op_message(-1, T0)


@pytest.mark.parametrize(("body", "offsets"), [(b"0", [0]), (b"17", [17]), (b"3,4,9", [3, 4, 9])])
def test_parse_op_body(body: bytes, offsets: list[int]) -> None:
    assert parse_op_body(body) == offsets


@pytest.mark.parametrize("body", [b"", b"x", b"-1", b"1,", b"1,,2", b"1.5", b"\xff", b"\xd9\xa3"])
def test_parse_op_body_rejects(body: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_op_body(body)
