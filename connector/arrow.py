"""The source's row schema and the Arrow record batches ``read()`` yields.

One row per message, columns in this order (``SCHEMA``)::

    column          Spark type            null?  from the pulled message
    --------------  --------------------  -----  -------------------------------------------
    topic           string                no     topic it was read from
    broker          string                no     broker name (the ``broker-a`` of ``broker-a:0``)
    queueId         int                   no     message queue id
    queueOffset     long                  no     logical offset in the queue
    messageId       string                no     RocketMQ message id
    tag             string                yes    tag, null when the message has none
    keys            array<string>         no     index keys ([] when none)
    body            binary                no     payload bytes
    properties      map<string,string>    yes    user properties; null when
                                                 ``includeProperties=false``
    bornTimestamp   timestamp             no     when the producer made it
    storeTimestamp  timestamp             no     when the broker stored it
    messageGroup    string                yes    FIFO message group, null when none

Spark checks that every ``pyarrow.RecordBatch`` a reader yields has exactly the schema
``to_arrow_schema(schema, timezone="UTC")`` — nullability included — so batches are
built against the schema Spark handed to the reader (:func:`arrow_schema_of`), never a
schema of our own. Everything here is pure and stateless.

>>> arrow_schema_of(SCHEMA).field("storeTimestamp").type
TimestampType(timestamp[us, tz=UTC])
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker_core.client.columnar import UnitColumns, split_properties
from broker_core.client.model import ReceivedMessage
from broker_core.errors import ConfigError
from broker_core.protocol.properties import SYSTEM_KEYS

SCHEMA: Final = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queueId", IntegerType(), False),
        StructField("queueOffset", LongType(), False),
        StructField("messageId", StringType(), False),
        StructField("tag", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("body", BinaryType(), False),
        StructField("properties", MapType(StringType(), StringType(), False), True),
        StructField("bornTimestamp", TimestampType(), False),
        StructField("storeTimestamp", TimestampType(), False),
        StructField("messageGroup", StringType(), True),
    ]
)

US_PER_MS: Final = 1_000


def _without_nullability(data_type: DataType) -> str:
    """A type's shape, ignoring nullability (``containsNull`` & co. print as booleans)."""
    if isinstance(data_type, ArrayType):
        return f"array<{_without_nullability(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        key, value = data_type.keyType, data_type.valueType
        return f"map<{_without_nullability(key)},{_without_nullability(value)}>"
    return data_type.simpleString()


def check_schema(schema: StructType) -> None:
    """Accept ``SCHEMA`` or a copy that differs only in nullability; ConfigError otherwise.

    The source's schema is fixed (as Kafka's is); a user schema given with ``.schema()``
    must name the same columns, in the same order, with the same types.
    """
    want = [(f.name, _without_nullability(f.dataType)) for f in SCHEMA.fields]
    got = [(f.name, _without_nullability(f.dataType)) for f in schema.fields]
    if got != want:
        raise ConfigError(
            f"the rocketmq source has a fixed schema ({SCHEMA.simpleString()}); "
            f"got {schema.simpleString()} — do not set a schema with .schema()"
        )


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects of batches read with ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


def message_size_bytes(msg: ReceivedMessage) -> int:
    """What a message weighs for ``maxBytesPerTrigger``: body, tag, keys and properties."""
    size = len(msg.body) + len(msg.tag or "") + sum(len(k) for k in msg.keys)
    return size + sum(len(k) + len(v) for k, v in msg.properties.items())


def _constant(text: str, count: int) -> pa.Array:
    """A string column holding ``text`` ``count`` times (built from buffers, no Python list)."""
    raw = text.encode()
    offsets = np.arange(0, len(raw) * count + 1, len(raw) or 1, dtype=np.int32)[: count + 1]
    if not raw:
        offsets = np.zeros(count + 1, np.int32)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)]
    return pa.Array.from_buffers(pa.string(), count, buffers)


def _timestamps_us(epoch_ms: np.ndarray) -> pa.Array:
    return pa.array(epoch_ms * US_PER_MS, pa.timestamp("us", tz="UTC"))


def units_to_record_batch(
    cols: UnitColumns, broker: str, schema: pa.Schema, *, include_properties: bool = True
) -> pa.RecordBatch:
    """One record batch of bulk-decoded units (all from ``broker``) with exactly ``schema``.

    Column for column the same rows as the message-by-message reference in
    ``tests/connector/arrow_reference.py`` builds, made with Arrow kernels instead of
    Python lists (``tests/connector/test_arrow_rows.py`` compares the two).
    """
    props = split_properties(cols, SYSTEM_KEYS)
    n = cols.count
    columns = [
        cols.topic,
        _constant(broker, n),
        pa.array(cols.queue_id, pa.int32()),
        pa.array(cols.queue_offset, pa.int64()),
        props.message_id,
        props.tag,
        props.keys,
        cols.body,
        props.user if include_properties else pa.nulls(n, schema.field(8).type),
        _timestamps_us(cols.born_timestamp_ms),
        _timestamps_us(cols.store_timestamp_ms),
        props.message_group,
    ]
    arrays = [
        a if a.type == schema.field(i).type else a.cast(schema.field(i).type)
        for i, a in enumerate(columns)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
