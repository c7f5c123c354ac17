"""The RocketMQ sink: DataFrame rows → messages, for batch and streaming writes.

Each row becomes one message (see ``sink_options`` for the columns and options). A task
groups its rows per topic and sends ``batchSize`` of them per SendMessage request, in row
order, so the rows of one message group keep their order in their queue.

Delivery:

* **at least once** (default): tasks send plain messages; commit has nothing to do. A task
  that fails after sending, retried by Spark, or a replayed micro-batch sends its rows
  again.
* **exactly once** (``exactlyOnce=true``): tasks send half messages, which stay invisible,
  and report them; the driver's ``commit`` makes exactly one attempt's halves of each
  micro-batch visible and ``abort`` rolls them back (protocol in ``exactly_once``). For a
  batch (non-streaming) write the same makes the job all-or-nothing.

Writers are created on the driver, pickled to executors, and are stateless: ``write``
opens its own client (channel) in the executor; ``commit``/``abort`` open one in the
driver-side process Spark runs them in.

Example (needs a running broker)::

    df.selectExpr("CAST(id AS STRING) AS body", "'orders' AS topic")\\
      .write.format("rocketmq").option("endpoints", "127.0.0.1:8081")\\
      .mode("append").save()
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.errors import ConfigError, InvalidArgumentError
from connector import exactly_once, transactions
from connector.exactly_once import TaskHalves
from connector.sink_options import ColumnPlan, SinkOptions, parse_sink_options, plan_columns
from connector.transactions import HalfRef

__all__ = ["RocketMQBatchWriter", "RocketMQStreamWriter", "make_stream_writer", "make_writer",
           "rows_to_messages"]  # fmt: skip


# --------------------------------------------------------------------------- rows → messages


def _column(batch: pa.RecordBatch, name: str | None) -> list[Any] | None:
    return None if name is None else batch.column(batch.schema.get_field_index(name)).to_pylist()


def _epoch_ms(batch: pa.RecordBatch, plan: ColumnPlan) -> list[Any] | None:
    if plan.delivery_timestamp is None:
        return None
    column = batch.column(batch.schema.get_field_index(plan.delivery_timestamp))
    if not plan.delivery_is_timestamp:
        return column.to_pylist()
    per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
    ticks = pc.cast(column, pa.int64())
    return [None if t is None else int(t // per_ms) for t in ticks.to_pylist()]


def _keys(value: Any, list_column: bool) -> tuple[str, ...]:
    if value is None:
        return ()
    if not list_column:
        return (value,)
    if any(k is None for k in value):
        raise InvalidArgumentError("column 'keys' holds a null key")
    return tuple(value)


def _properties(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    props = dict(value)  # Arrow hands a map over as (key, value) pairs
    if any(v is None for v in props.values()):
        raise InvalidArgumentError("column 'properties' holds a null value")
    return props


def rows_to_messages(
    batch: pa.RecordBatch, plan: ColumnPlan, default_topic: str | None
) -> Iterator[tuple[str, OutgoingMessage]]:
    """(topic, message) for every row of ``batch``, in row order (pure).

    Raises InvalidArgumentError naming the column for a null or empty body, a row with
    no topic, or a null inside keys/properties.
    """
    bodies = _column(batch, plan.body)
    topics = _column(batch, plan.topic)
    tags, keys = _column(batch, plan.tag), _column(batch, plan.keys)
    props, groups = _column(batch, plan.properties), _column(batch, plan.message_group)
    delivery = _epoch_ms(batch, plan)
    assert bodies is not None  # the plan always has a body column
    for row, body in enumerate(bodies):
        if body is None or len(body) == 0:
            raise InvalidArgumentError(f"column 'body' is {'null' if body is None else 'empty'}"
                                       " in a row; every message needs a body")  # fmt: skip
        topic = (topics[row] if topics is not None else None) or default_topic
        if topic is None:
            raise InvalidArgumentError("column 'topic' is null in a row and the 'topic' option "
                                       "is not set")  # fmt: skip
        data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        yield topic, OutgoingMessage(
            data, tags[row] if tags is not None else None,
            _keys(keys[row], plan.keys_is_list) if keys is not None else (),
            _properties(props[row]) if props is not None else None,
            groups[row] if groups is not None else None,
            delivery[row] if delivery is not None else None,
        )  # fmt: skip


# --------------------------------------------------------------------------- one task


@dataclass
class _Task:
    """The sending state of one write task (lives only inside ``write``)."""

    options: SinkOptions
    client: RocketMQClient
    rows: int = 0
    first_send_ms: int = 0

    def __post_init__(self) -> None:
        self.pending: dict[str, list[tuple[int, OutgoingMessage]]] = {}
        self.halves: dict[int, HalfRef] = {}

    def add(self, topic: str, message: OutgoingMessage) -> None:
        queue = self.pending.setdefault(topic, [])
        queue.append((self.rows, message))
        self.rows += 1
        if len(queue) >= self.options.batch_size:
            self.flush(topic)

    def flush(self, topic: str) -> None:
        queue = self.pending.pop(topic, [])
        if not queue:
            return
        if not self.first_send_ms:
            self.first_send_ms = time.time_ns() // 1_000_000
        messages = [m for _, m in queue]
        if not self.options.exactly_once:
            self.client.send_batch(topic, messages)
            return
        refs = transactions.prepare(self.client, topic, messages,
                                    recovery_ms=self.options.transaction_timeout_ms)
        for (seq, _), ref in zip(queue, refs, strict=True):
            self.halves[seq] = ref

    def finish(self) -> TaskHalves:
        for topic in list(self.pending):
            self.flush(topic)
        partition, attempt, query_id, batch_id = _task_context()
        return TaskHalves(partition, attempt, self.rows, query_id, batch_id,
                          self.first_send_ms, [self.halves[s] for s in sorted(self.halves)])


def _task_context() -> tuple[int, int, str, int]:
    """(partition id, attempt, streaming query id, micro-batch id) of the running task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside a Spark task (unit tests)
        return 0, 0, "", -1
    batch = context.getLocalProperty("streaming.sql.batchId")
    return (context.partitionId(), context.attemptNumber(),
            context.getLocalProperty("sql.streaming.queryId") or "",
            int(batch) if batch and batch.lstrip("-").isdigit() else -1)  # fmt: skip


def _client(options: SinkOptions) -> RocketMQClient:
    return RocketMQClient(options.endpoints, timeout_s=options.request_timeout_ms / 1000)


def write_partition(options: SinkOptions, plan: ColumnPlan,
                    batches: Iterator[pa.RecordBatch]) -> TaskHalves:  # fmt: skip
    """Send one partition's rows; with exactlyOnce as halves, reported in row order.

    If it raises, it rolls back the halves it already sent (best-effort); halves of a
    task that dies outright are rolled back by the broker's check-back.
    """
    client = _client(options)
    task = _Task(options, client)
    try:
        for batch in batches:
            for topic, message in rows_to_messages(batch, plan, options.topic):
                task.add(topic, message)
        return task.finish()
    except BaseException:
        exactly_once.rollback_quietly(client, list(task.halves.values()))
        raise
    finally:
        client.close()


# --------------------------------------------------------------------------- the writers


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: at-least-once, or all-or-nothing with exactlyOnce."""

    def __init__(self, options: SinkOptions, plan: ColumnPlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_partition(self.options, self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            with _client(self.options) as client:
                exactly_once.commit_job(client, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            with _client(self.options) as client:
                exactly_once.abort_job(client, messages)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketmq")``: at-least-once, or exactly-once per micro-batch."""

    def __init__(self, options: SinkOptions, plan: ColumnPlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_partition(self.options, self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None],
               batchId: int) -> None:
        if self.options.exactly_once:
            with _client(self.options) as client:
                exactly_once.commit_stream_batch(
                    client, messages, batchId,
                    producer_group=self.options.producer_group,
                    timeout_ms=self.options.transaction_timeout_ms)  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None],
              batchId: int) -> None:
        if self.options.exactly_once:
            with _client(self.options) as client:
                exactly_once.abort_stream_batch(client, messages, batchId,
                                                producer_group=self.options.producer_group)


# --------------------------------------------------------------------------- entry points


def make_writer(options: Mapping[str, str], schema: StructType,
                overwrite: bool) -> DataSourceWriter:  # fmt: skip
    """The batch writer for ``DataSource.writer``; checks options and columns first.

    A topic cannot be overwritten: ``mode("overwrite")`` is a ConfigError.
    """
    if overwrite:
        raise ConfigError("save mode 'overwrite' is not supported by the rocketmq sink "
                          "(messages are appended); use mode('append')")  # fmt: skip
    parsed = parse_sink_options(options)
    return RocketMQBatchWriter(parsed, plan_columns(schema, parsed))


def make_stream_writer(options: Mapping[str, str], schema: StructType,
                       overwrite: bool) -> DataSourceStreamWriter:  # fmt: skip
    """The streaming writer for ``DataSource.streamWriter``; checks options and columns.

    ``overwrite`` (output mode complete) is accepted: every micro-batch's rows are sent,
    as Spark's Kafka sink does.
    """
    del overwrite
    parsed = parse_sink_options(options)
    return RocketMQStreamWriter(parsed, plan_columns(schema, parsed))
