"""What the RocketMQ sink accepts: its options and the columns of the DataFrame it writes.

Both are checked on the driver, before any task runs, so a bad write fails at once with an
error that names the option or the column (``ConfigError`` for options,
``InvalidArgumentError`` for columns; both are ``broker_core.errors`` classes).

Options (names are case-insensitive, as Spark passes them lower-cased)::

    endpoints               -         broker HOST:PORT[,HOST:PORT]: rows are spread over
                                      all of them (exactlyOnce takes one)
    namesrv                 -         NameServers HOST:PORT[;HOST:PORT] (instead of
                                      endpoints): rows are spread over the broker groups
                                      of each topic's route (not with exactlyOnce)
    topic                   -         the topic of every row: wins over a topic column
                                      (as in Spark's Kafka sink)
    batchSize               4096      messages per send request (1 .. 10000)
    ignoreExtraColumns      false     drop columns the sink does not know instead of failing
    exactlyOnce             false     transactional (half) messages committed by the driver
    producerGroup           -         name of the exactly-once sink (like Kafka's
                                      transactional.id); default: the streaming query id
    transactionTimeoutMs    900000    how long a half message stays unresolved before the
                                      broker starts checking it back (>= 1000, whole seconds)
    requestTimeoutMs        10000     timeout of one broker call
    idempotent              streaming each row's message id derives from (query id, batch
                            on, batch id, partition, row): a task Spark retries re-sends
                            off       the same ids and the broker drops the repeats
                                      (exactly once within its dedup window, no
                                      transactions; README "Idempotent sends")
    trace                   false     write a Pub trace record per stored message, with the
                                      Spark query id, batch id and partition (at-least-once
                                      sink; connector/trace.py)

Columns (matched case-insensitively)::

    body               binary | string             required, never null or empty
    topic              string                      required unless the topic option is set
                                                   (then ignored)
    tag                string                      optional
    keys               array<string> | string      optional; a string is one key
    properties         map<string,string>          optional user properties
    messageGroup       string                      optional: FIFO (same group, same queue)
    deliveryTimestamp  timestamp | long (epoch ms) optional: a timed message; not with
                                                   exactlyOnce (the broker cannot hold a
                                                   transactional message for a time)

>>> opts = parse_sink_options({"endpoints": "127.0.0.1:8081", "topic": "orders"})
>>> opts.batch_size, opts.exactly_once
(4096, False)
>>> from pyspark.sql.types import BinaryType, StructField, StructType
>>> plan = plan_columns(StructType([StructField("body", BinaryType())]), opts)
>>> plan.body, plan.body_is_text
('body', False)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from broker_core.errors import ConfigError, InvalidArgumentError
from connector import credentials
from connector.credentials import NO_ACCESS, Access
from connector.option_names import suggestion
from connector.option_parse import (
    boolean,
    group_name,
    int_in,
    parse_endpoints,
    parse_namesrv,
    topic_name,
)

DEFAULT_BATCH_SIZE: Final = (
    4096  # a request costs a round trip and ~0.5 ms of broker CPU: amortise it
)
MAX_BATCH_SIZE: Final = 10_000
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 900_000
DEFAULT_REQUEST_TIMEOUT_MS: Final = 10_000

# Canonical option names; Spark hands them to the data source lower-cased.
SINK_OPTIONS: Final = (
    "endpoints",
    "namesrv",
    "topic",
    "batchSize",
    "ignoreExtraColumns",
    "exactlyOnce",
    "producerGroup",
    "transactionTimeoutMs",
    "requestTimeoutMs",
    "idempotent",
    "trace",
    *credentials.OPTIONS,
)
# Options Spark itself adds to a write; accepted and ignored.
SPARK_OPTIONS: Final = frozenset({"checkpointlocation", "path", "queryname"})  # set by Spark

COLUMNS: Final = ("body", "topic", "tag", "keys", "properties", "messageGroup", "deliveryTimestamp")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Parsed, validated sink options (picklable; shipped to every task)."""

    endpoints: tuple[str, ...]  # empty with namesrv
    topic: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    ignore_extra_columns: bool = False
    exactly_once: bool = False
    producer_group: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    namesrv: str | None = None
    access: Access = NO_ACCESS  # accessKey/secretKey/tls/caFile (connector/credentials.py)
    idempotent: bool | None = None  # None: the writer's default (streaming on, batch off)
    write_id: str = ""  # made by the driver: the ids' base when there is no query id
    trace: bool = False  # Pub trace records (connector/trace.py)


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the writer's options; ConfigError naming the first bad or unknown option."""
    canonical = {name.lower(): name for name in SINK_OPTIONS}
    given: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in SPARK_OPTIONS:
            continue
        if low not in canonical:
            raise ConfigError(
                f"unknown option '{key}' for the rocketmq sink{suggestion(key, SINK_OPTIONS)}; "
                f"known options: {', '.join(SINK_OPTIONS)}"
            )
        given[canonical[low]] = str(value)
    if ("endpoints" in given) == ("namesrv" in given):
        raise ConfigError(
            "option 'endpoints' / 'namesrv': exactly one is required (endpoints: "
            "the brokers' HOST:PORT[,HOST:PORT]; namesrv: the NameServers' "
            "HOST:PORT[;HOST:PORT])"
        )
    timeout_ms = given.get("transactionTimeoutMs")
    parsed = SinkOptions(
        endpoints=parse_endpoints(given["endpoints"]) if "endpoints" in given else (),
        namesrv=parse_namesrv(given["namesrv"]) if "namesrv" in given else None,
        topic=topic_name("topic", given["topic"]) if "topic" in given else None,
        batch_size=int_in(
            "batchSize", given.get("batchSize", str(DEFAULT_BATCH_SIZE)), 1, MAX_BATCH_SIZE
        ),
        ignore_extra_columns=boolean(
            "ignoreExtraColumns", given.get("ignoreExtraColumns", "false")
        ),
        exactly_once=boolean("exactlyOnce", given.get("exactlyOnce", "false")),
        producer_group=(
            group_name("producerGroup", given["producerGroup"])
            if "producerGroup" in given
            else None
        ),
        transaction_timeout_ms=(
            int_in("transactionTimeoutMs", timeout_ms, 1_000, 7 * 86_400_000)
            if timeout_ms is not None
            else DEFAULT_TRANSACTION_TIMEOUT_MS
        ),
        request_timeout_ms=int_in(
            "requestTimeoutMs",
            given.get("requestTimeoutMs", str(DEFAULT_REQUEST_TIMEOUT_MS)),
            1,
            3_600_000,
        ),
        access=credentials.parse_access(given),
        idempotent=boolean("idempotent", given["idempotent"]) if "idempotent" in given else None,
        trace=boolean("trace", given.get("trace", "false")),
    )
    if parsed.exactly_once and len(parsed.endpoints) != 1:
        raise ConfigError(
            "option 'endpoints': exactlyOnce=true writes through one broker; "
            f"give one endpoint (not namesrv), got "
            f"{', '.join(parsed.endpoints) or 'namesrv ' + str(parsed.namesrv)}"
        )
    if parsed.exactly_once and parsed.trace:
        raise ConfigError("option 'trace' applies to the at-least-once sink, not exactlyOnce=true")
    if not parsed.exactly_once:
        for name in ("producerGroup", "transactionTimeoutMs"):
            if name in given:
                raise ConfigError(f"option '{name}' only applies with exactlyOnce=true")
    return parsed


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """Which DataFrame column feeds which message field (None: not present).

    ``body_is_text``: the body column is a string (sent UTF-8 encoded);
    ``keys_is_list``: keys is array<string> (else one string key);
    ``delivery_is_timestamp``: deliveryTimestamp is a timestamp (else epoch ms).
    """

    body: str
    topic: str | None = None
    tag: str | None = None
    keys: str | None = None
    properties: str | None = None
    message_group: str | None = None
    delivery_timestamp: str | None = None
    body_is_text: bool = False
    keys_is_list: bool = False
    delivery_is_timestamp: bool = False


def _expect(column: str, actual: DataType, allowed: tuple[DataType, ...], shown: str) -> None:
    if not any(actual == want for want in allowed):
        raise InvalidArgumentError(
            f"column '{column}' must be {shown}, got {actual.simpleString()}"
        )


_TYPES: Final[dict[str, tuple[tuple[DataType, ...], str]]] = {
    "body": ((BinaryType(), StringType()), "binary or string"),
    "topic": ((StringType(),), "string"),
    "tag": ((StringType(),), "string"),
    "keys": (
        (ArrayType(StringType(), True), ArrayType(StringType(), False), StringType()),
        "array<string> or string",
    ),
    "properties": (
        (MapType(StringType(), StringType(), True), MapType(StringType(), StringType(), False)),
        "map<string,string>",
    ),
    "messageGroup": ((StringType(),), "string"),
    "deliveryTimestamp": ((TimestampType(), LongType()), "timestamp or long (epoch ms)"),
}


def plan_columns(schema: StructType, options: SinkOptions) -> ColumnPlan:
    """Map the DataFrame's columns to message fields; InvalidArgumentError naming the column."""
    known = {name.lower(): name for name in COLUMNS}
    found: dict[str, str] = {}
    for field in schema.fields:
        canonical = known.get(field.name.lower())
        if canonical is None:
            if options.ignore_extra_columns:
                continue
            raise InvalidArgumentError(
                f"column '{field.name}' is not a message field ({', '.join(COLUMNS)}); "
                f"drop it or set ignoreExtraColumns=true"
            )
        if canonical in found:
            raise InvalidArgumentError(
                f"column '{canonical}' appears twice ({found[canonical]!r}, {field.name!r})"
            )
        allowed, shown = _TYPES[canonical]
        _expect(field.name, field.dataType, allowed, shown)
        found[canonical] = field.name
    types = {f.name: f.dataType for f in schema.fields}
    if "body" not in found:
        raise InvalidArgumentError("column 'body' is required (binary or string)")
    if "topic" not in found and options.topic is None:
        raise InvalidArgumentError("column 'topic' is required unless the 'topic' option is set")
    if "deliveryTimestamp" in found and options.exactly_once:
        raise InvalidArgumentError(
            "column 'deliveryTimestamp' cannot be written with exactlyOnce=true: the broker "
            "does not hold transactional messages for a delivery time"
        )
    return ColumnPlan(
        body=found["body"],
        topic=found.get("topic"),
        tag=found.get("tag"),
        keys=found.get("keys"),
        properties=found.get("properties"),
        message_group=found.get("messageGroup"),
        delivery_timestamp=found.get("deliveryTimestamp"),
        body_is_text=types[found["body"]] == StringType(),
        keys_is_list="keys" in found and isinstance(types[found["keys"]], ArrayType),
        delivery_is_timestamp=(
            "deliveryTimestamp" in found and types[found["deliveryTimestamp"]] == TimestampType()
        ),
    )
