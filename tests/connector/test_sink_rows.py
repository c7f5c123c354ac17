"""``sink_rows``: Arrow batches → message columns, checked row by row (pure, no Spark).

The at-least-once sink sends these columns through ``wire``; the exactly-once sink turns
them into OutgoingMessages. Both must describe the same messages, and a bad row must
stop both at the same row with the same error.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from rocketmq.grpc_protocol import service_pb2

from broker_core.client.wire import encode_send_request
from broker_core.errors import InvalidArgumentError
from connector.sink_options import parse_sink_options, plan_columns
from connector.sink_rows import batch_columns, columns_by_topic, rows_to_messages
from tests.client.pb_reference import batch_to_protobuf

NO_TOPIC = parse_sink_options({"endpoints": "127.0.0.1:1"})
DEFAULT_T = parse_sink_options({"endpoints": "127.0.0.1:1", "topic": "t"})
PROPS = pa.map_(pa.string(), pa.string())


def plan_for(batch: pa.RecordBatch, spark_types: dict[str, Any], options: Any = NO_TOPIC) -> Any:
    schema = StructType([StructField(f.name, spark_types[f.name]) for f in batch.schema])
    return plan_columns(schema, options)


def without_stamps(raw: bytes) -> list[Any]:
    messages = list(service_pb2.SendMessageRequest.FromString(raw).messages)
    for msg in messages:
        msg.system_properties.ClearField("message_id")
        msg.system_properties.ClearField("born_timestamp")
    return messages


def test_columns_encode_to_the_messages_the_rows_become() -> None:
    due = dt.datetime(2030, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "body": pa.array(["héllo", "b", "c", "d"], pa.large_string()),
            "tag": ["T1", None, "", "T1"],
            "keys": [["k1", "ключ"], None, [], ["k"]],
            "properties": pa.array([[("a", "1")], None, [], [("a", "x"), ("a", "y")]], PROPS),
            "messageGroup": [None, None, "g", None],
            "deliveryTimestamp": pa.array([due, None, None, due], pa.timestamp("us", tz="UTC")),
        }
    )
    plan = plan_for(
        batch,
        {
            "body": StringType(),
            "tag": StringType(),
            "keys": ArrayType(StringType()),
            "properties": MapType(StringType(), StringType()),
            "messageGroup": StringType(),
            "deliveryTimestamp": TimestampType(),
        },
        DEFAULT_T,
    )
    topics, columns, error = batch_columns(batch, plan, "t")
    assert (topics, error) == ("t", None)
    raw = encode_send_request(
        "t",
        columns.bodies,
        tags=columns.tags,
        keys=columns.keys,
        properties=columns.properties,
        message_groups=columns.message_groups,
        delivery_ms=columns.delivery_ms,
    )
    messages = [m for _, m in rows_to_messages(batch, plan, "t")]
    wanted = batch_to_protobuf("t", messages)
    for proto in wanted:
        proto.system_properties.ClearField("message_id")
        proto.system_properties.ClearField("born_timestamp")
    assert without_stamps(raw) == wanted
    assert messages[3].properties == {"a": "y"} and messages[0].keys == ("k1", "ключ")
    assert messages[0].delivery_timestamp_ms == int(due.timestamp() * 1000)


def test_rows_go_to_their_topic_in_row_order() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "body": [b"0", b"1", b"2", b"3"],
            "topic": ["a", "b", "b", "a"],
            "keys": ["k0", None, "k2", "k3"],
        }
    )
    plan = plan_for(batch, {"body": BinaryType(), "topic": StringType(), "keys": StringType()})
    by_topic, error = columns_by_topic(batch, plan, None)
    assert error is None
    assert {t: c.bodies for t, c in by_topic.items()} == {"a": [b"0", b"3"], "b": [b"1", b"2"]}
    assert by_topic["a"].keys == [("k0",), ("k3",)] and by_topic["b"].keys == [None, ("k2",)]


def test_the_topic_option_wins_over_the_topic_column() -> None:
    batch = pa.RecordBatch.from_pydict({"body": [b"0", b"1", b"2"], "topic": ["a", None, ""]})
    plan = plan_for(batch, {"body": BinaryType(), "topic": StringType()}, DEFAULT_T)
    by_topic, error = columns_by_topic(batch, plan, "t")
    assert error is None
    assert {t: c.bodies for t, c in by_topic.items()} == {"t": [b"0", b"1", b"2"]}
    assert [topic for topic, _ in rows_to_messages(batch, plan, "t")] == ["t", "t", "t"]


@pytest.mark.parametrize(
    ("rows", "kept", "match"),
    [
        ({"body": [b"a", None, b""], "topic": ["t", "t", None]}, 1, "'body' is null"),
        ({"body": [b"a", b"b", b""], "topic": ["t", None, "t"]}, 1, "'topic' is null"),
        ({"body": [b"a", b"", b"c"], "topic": ["t", None, "t"]}, 1, "'body' is empty"),
        (
            {"body": [b"a", b"b"], "topic": ["t", "t"], "keys": [["k"], ["x", None]]},
            1,
            "'keys' holds a null key",
        ),
        (
            {
                "body": [b"a", b"b", None],
                "topic": ["t", "t", "t"],
                "properties": pa.array([None, [("p", None)], None], PROPS),
            },
            1,
            "'properties' holds a null value",
        ),
    ],
)
def test_the_rows_before_the_first_bad_row_come_with_its_error(
    rows: dict[str, Any], kept: int, match: str
) -> None:
    batch = pa.RecordBatch.from_pydict(rows)
    plan = plan_for(
        batch,
        {
            "body": BinaryType(),
            "topic": StringType(),
            "keys": ArrayType(StringType()),
            "properties": MapType(StringType(), StringType()),
        },
    )
    by_topic, error = columns_by_topic(batch, plan, None)
    assert sum(len(c) for c in by_topic.values()) == kept
    assert isinstance(error, InvalidArgumentError) and re.search(match, str(error))
    sent: list[Any] = []
    with pytest.raises(InvalidArgumentError, match=match):
        sent.extend(rows_to_messages(batch, plan, None))
    assert len(sent) == kept


def test_a_null_outside_a_slice_does_not_count_and_later_values_win() -> None:
    props = pa.array([[("p", None)], [("p", "1")], [("p", None), ("p", "2")]], PROPS)
    batch = pa.RecordBatch.from_pydict({"body": [b"a", b"b", b"c"], "properties": props})
    plan = plan_for(
        batch, {"body": BinaryType(), "properties": MapType(StringType(), StringType())}, DEFAULT_T
    )
    _, columns, error = batch_columns(batch.slice(1), plan, "t")
    assert error is None  # row 0 is outside the slice; row 2's null is overwritten
    assert columns.properties == [{"p": "1"}, {"p": "2"}]


def test_long_delivery_times_and_binary_bodies_pass_through() -> None:
    batch = pa.RecordBatch.from_pydict({"body": [b"\x00%"], "deliveryTimestamp": [-5]})
    plan = plan_for(batch, {"body": BinaryType(), "deliveryTimestamp": LongType()}, DEFAULT_T)
    _, columns, _ = batch_columns(batch, plan, "t")
    assert (columns.bodies, columns.delivery_ms, columns.tags) == ([b"\x00%"], [-5], None)
