"""The trace data format (``broker_core.protocol.trace``) against records written by hand
from RocketMQ's TraceDataEncoder field order, as the 4.x Java client sends them."""

from __future__ import annotations

import numpy as np
import pytest

from broker_core.broker.trace.units import raw_ids
from broker_core.errors import InvalidArgumentError
from broker_core.message import Message
from broker_core.protocol.trace import (
    BROKER_TYPES,
    CONTENT_SPLITOR,
    FIELD_SPLITOR,
    TraceRecord,
    decode,
    encode,
)
from broker_core.store.columns import encode_messages

C, F = CONTENT_SPLITOR, FIELD_SPLITOR


def java(*fields: object) -> str:
    """A record as the Java encoder appends it: fields joined by \\u0001, ended by \\u0002."""
    return C.join(str(f) for f in fields) + F


PUB = java(
    "Pub",
    1700000000123,
    "DefaultRegion",
    "PID_A",
    "orders",
    "7F00000100002A9F0000000000000001",
    "TagA",
    "k1 k2",
    "10.0.0.5:10911",
    42,
    7,
    0,
    "0A00000500002A9F00000000000004D2",
    "true",
)
SUB_BEFORE = java(
    "SubBefore",
    1700000000200,
    "DefaultRegion",
    "CID_A",
    "req-1",
    "7F00000100002A9F0000000000000001",
    2,
    "k1 k2",
)
SUB_AFTER = java(
    "SubAfter", "req-1", "7F00000100002A9F0000000000000001", 15, "false", "k1 k2", 1, 1700000000215
)
END_TX = java(
    "EndTransaction",
    1700000000300,
    "DefaultRegion",
    "PID_TX",
    "pay",
    "MSGID",
    "null",
    "null",
    "10.0.0.5:10911",
    1,
    "TXID",
    "ROLLBACK_MESSAGE",
    "true",
)


def test_java_records_decode_field_by_field() -> None:
    pub, before, after, end = decode(PUB + SUB_BEFORE + SUB_AFTER + END_TX)
    assert (pub.type, pub.time_ms, pub.region, pub.group, pub.topic) == (
        "Pub",
        1700000000123,
        "DefaultRegion",
        "PID_A",
        "orders",
    )
    assert (pub.tags, pub.keys, pub.host, pub.body_length, pub.cost_ms, pub.msg_type) == (
        "TagA",
        "k1 k2",
        "10.0.0.5:10911",
        42,
        7,
        0,
    )
    assert (pub.offset_msg_id, pub.success, pub.client_host) == (
        "0A00000500002A9F00000000000004D2",
        True,
        "",
    )
    assert (before.group, before.request_id, before.retry_times, before.keys) == (
        "CID_A",
        "req-1",
        2,
        "k1 k2",
    )
    assert (after.request_id, after.cost_ms, after.success, after.context_code, after.time_ms) == (
        "req-1",
        15,
        False,
        1,
        1700000000215,
    )
    assert (end.transaction_id, end.transaction_state, end.from_check, end.msg_type) == (
        "TXID",
        "ROLLBACK_MESSAGE",
        True,
        1,
    )


def test_encoder_writes_what_the_java_encoder_writes() -> None:
    assert (
        encode(decode(PUB + SUB_BEFORE + SUB_AFTER + END_TX))
        == PUB + SUB_BEFORE + SUB_AFTER + END_TX
    )


def test_older_client_layouts() -> None:
    old_pub = java("Pub", 1, "R", "PID", "t", "ID", "", "", "h:1", 3, 4, 0, "false")  # 13 fields
    with_host = java(
        "Pub", 1, "R", "PID", "t", "ID", "", "", "h:1", 3, 4, 0, "OFF", "true", "1.2.3.4"
    )
    old_after = java("SubAfter", "req", "ID", 5, "true", "")  # no context code, no time
    a, b, c = decode(old_pub + with_host + old_after)
    assert (a.success, a.offset_msg_id) == (False, "")
    assert (b.success, b.offset_msg_id, b.client_host) == (True, "OFF", "1.2.3.4")
    assert (c.time_ms, c.context_code, c.success) == (0, 0, True)


def test_every_record_type_round_trips() -> None:
    records = [
        TraceRecord(
            "Pub", 1, "R", "PID", "t", "ID", "tag", "k", "h:1", 9, 2, 3, "OFF", False, "c:1"
        ),
        TraceRecord(
            "SubBefore", 2, "R", "CID", msg_id="ID", keys="k", request_id="r", retry_times=1
        ),
        TraceRecord(
            "SubAfter",
            3,
            msg_id="ID",
            keys="k",
            cost_ms=4,
            success=False,
            request_id="r",
            context_code=2,
        ),
        TraceRecord(
            "EndTransaction",
            4,
            "R",
            "PID",
            "t",
            "ID",
            "tag",
            "k",
            "h:1",
            msg_type=1,
            transaction_id="TX",
            transaction_state="COMMIT_MESSAGE",
            from_check=True,
        ),
        *(
            TraceRecord(
                t,
                5,
                "broker-a",
                "g",
                "t",
                "ID",
                host="h:2",
                client_id="c",
                attempt=2,
                queue_id=1,
                offset=9,
                cost_ms=3,
                status="invisible=1000",
            )
            for t in BROKER_TYPES
        ),
    ]
    assert decode(encode(records)) == records


def test_unknown_types_are_skipped_as_rocketmq_does() -> None:
    assert decode(java("Future", 1, 2) + SUB_BEFORE)[0].type == "SubBefore"
    assert decode("") == []


@pytest.mark.parametrize(
    "text",
    [
        java("Pub", 1, "R"),  # too short
        java("SubBefore", "soon", "R", "G", "r", "ID", 0, "k"),  # not a number
        java("Ack", 1, "b", "g", "t", "ID", "h", "c", "x", 0, 0, 0, ""),  # attempt not a number
    ],
)
def test_malformed_records_are_clear_errors(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        decode(text)


def test_a_splitter_inside_a_field_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="U\\+0001"):
        encode([TraceRecord("Ack", 1, msg_id="a\u0001b")])


def test_index_keys_are_the_id_then_each_key() -> None:
    assert TraceRecord("Pub", 1, msg_id="ID", keys="k1 k2").index_keys() == ["ID", "k1", "k2"]


def _units(props: list[dict[str, str]]) -> tuple[bytes, np.ndarray]:
    body = b"\x02UNIQ_KEY\x01NOT-AN-ID\x02"  # a body that looks like a property
    batch = encode_messages(
        [Message("t", body, 0, p) for p in props], max_body_bytes=64, max_properties_bytes=64
    )
    return bytes(batch.units), batch.sizes


def test_raw_unit_ids_as_columns_and_one_by_one() -> None:
    uniform = [{"UNIQ_KEY": f"ID-{i}", "TAGS": "x"} for i in range(5)]
    assert raw_ids(*_units(uniform))[0] == [f"ID-{i}" for i in range(5)]
    mixed = [
        {"UNIQ_KEY": "ID-1"},
        {"a": "b", "UNIQ_KEY": "ID-22"},  # not first
        {"xUNIQ_KEY": "no", "KEYS": "k"},  # a longer name is not the id, and no id
        {"UNIQ_KEY": "ID-333", "xUNIQ_KEY": "no"},
    ]
    assert raw_ids(*_units(mixed))[0] == ["ID-1", "ID-22", "", "ID-333"]
    longer = [{"UNIQ_KEY": "ID-1"}, {"UNIQ_KEY": "ID-12"}]  # the first is the shortest
    assert raw_ids(*_units(longer))[0] == ["ID-1", "ID-12"]
