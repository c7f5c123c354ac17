"""The RocketMQ sink: DataFrame rows → messages, for batch and streaming writes.

Each row becomes one message (see ``sink_options`` for the columns and options). A task
groups its rows per topic and sends ``batchSize`` of them per SendMessage request, in row
order, so the rows of one message group keep their order in their queue. With several
brokers (``endpoints="a,b"``, or ``namesrv``: the groups of the topic's route) each
request's rows are spread over them (``sink_route``): round robin, a message group always
to the same broker.

Delivery:

* **at least once** (default): tasks send plain messages; commit has nothing to do. A task
  that fails after sending, retried by Spark, or a replayed micro-batch sends its rows
  again — with ``idempotent`` (on by default for streaming writes) under the same message
  ids, derived from (query id, batch id, partition, topic, row), so the broker's dedup
  window drops the repeats: exactly once without transactions, within that window (and
  for deterministic input; a route that changed between attempts spreads rows anew).
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

import contextlib
import dataclasses
import hashlib
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.client.in_flight import PendingSend
from broker_core.client.message_ids import ID_BLOCKS
from broker_core.errors import ConfigError
from connector import exactly_once, trace, transactions
from connector.exactly_once import TaskHalves
from connector.sink_options import ColumnPlan, SinkOptions, parse_sink_options, plan_columns
from connector.sink_route import SinkTargets, spread
from connector.sink_rows import MessageColumns, columns_by_topic, rows_to_messages
from connector.transactions import HalfRef

__all__ = [
    "RocketMQBatchWriter",
    "RocketMQStreamWriter",
    "make_stream_writer",
    "make_writer",
    "rows_to_messages",
]


# --------------------------------------------------------------------------- one task


@dataclass
class _PlainTask:
    """An at-least-once write task: each topic's rows, ``batchSize`` per request.

    Rows go from Arrow to the request bytes column by column (``sink_rows`` →
    ``RocketMQClient.send_columns``), never through one object per row.
    """

    options: SinkOptions
    targets: SinkTargets
    rows: int = 0
    first_send_ms: int = 0
    sent: int = 0  # rows sent so far: the round-robin position over the brokers

    def __post_init__(self) -> None:
        self.pending: dict[str, MessageColumns] = {}
        self.halves: dict[int, HalfRef] = {}  # none: plain messages need no ending
        self.topic_rows: dict[str, int] = {}  # rows of each topic sent: the next row index
        self.id_base = _id_base(self.options) if self.options.idempotent else ""
        self.traced: list[tuple[RocketMQClient, str, PendingSend, list[int], int]] = []

    def add_batch(self, batch: pa.RecordBatch, plan: ColumnPlan) -> None:
        """Queue the batch's rows; send every full ``batchSize`` of a topic. A bad row
        raises once the rows before it are queued (and sent, if they fill a request)."""
        by_topic, error = columns_by_topic(batch, plan, self.options.topic)
        for topic, columns in by_topic.items():
            self.rows += len(columns)
            pending = self.pending.setdefault(topic, MessageColumns([]))
            if not pending:
                pending = self.pending[topic] = columns
            else:
                pending.extend(columns)
            size = self.options.batch_size
            full = len(pending) - len(pending) % size
            for start in range(0, full, size):
                self.send(topic, pending.rows(start, start + size))
            if full:
                self.pending[topic] = pending.rows(full, len(pending))
        if error is not None:
            raise error

    def send(self, topic: str, columns: MessageColumns) -> None:
        """Send ``columns`` to ``topic``, spread over its brokers (``sink_route.spread``)."""
        if not self.first_send_ms:
            self.first_send_ms = time.time_ns() // 1_000_000
        clients = self.targets.clients(topic)
        first = self.topic_rows.get(topic, 0)
        self.topic_rows[topic] = first + len(columns)
        if self.id_base:  # ids from (write, partition, topic, row): a retry sends the same
            prefix = hashlib.sha256(f"{self.id_base}:{topic}".encode()).hexdigest()[:24]
            ids = ID_BLOCKS.fixed(b"02" + prefix.upper().encode(), first)
        with ids if self.id_base else contextlib.nullcontext():
            if len(clients) == 1:
                self._send(clients[0], topic, columns)
            else:
                parts = spread(len(clients), len(columns), columns.message_groups, start=self.sent)
                for client, rows in zip(clients, parts, strict=True):
                    if rows:
                        self._send(client, topic, columns.pick(rows))
        self.sent += len(columns)

    def _send(self, client: RocketMQClient, topic: str, columns: MessageColumns) -> None:
        sent_ms = trace.now_ms()
        pending = client.send_columns_async(  # up to the client's max_in_flight at once
            topic,
            columns.bodies,
            tags=columns.tags,
            keys=columns.keys,
            properties=columns.properties,
            message_groups=columns.message_groups,
            delivery_ms=columns.delivery_ms,
            receipts=self.options.trace,  # else only each request's storing is checked
        )
        if self.options.trace:
            self.traced.append((client, topic, pending, [len(b) for b in columns.bodies], sent_ms))

    def _write_traces(self) -> None:
        """Pub records of every request sent (all answered: after the flush)."""
        context = trace.spark_context()
        for client, topic, pending, lengths, sent_ms in self.traced:
            receipts = pending.result()
            cost = trace.now_ms() - sent_ms
            trace.write(client, trace.pub_records(context, topic, receipts, lengths, sent_ms, cost))
        self.traced.clear()

    def finish(self) -> TaskHalves:
        for topic, columns in self.pending.items():
            if columns:
                self.send(topic, columns)
        self.pending.clear()
        self.targets.flush()  # every request answered (or its error raised) before commit
        if self.traced:
            self._write_traces()
        return _task_halves(self.rows, self.first_send_ms, [])


@dataclass
class _HalfTask:
    """An exactly-once write task: rows sent as half messages, remembered in row order."""

    options: SinkOptions
    client: RocketMQClient
    rows: int = 0
    first_send_ms: int = 0

    def __post_init__(self) -> None:
        self.pending: dict[str, list[tuple[int, OutgoingMessage]]] = {}
        self.halves: dict[int, HalfRef] = {}

    def add_batch(self, batch: pa.RecordBatch, plan: ColumnPlan) -> None:
        for topic, message in rows_to_messages(batch, plan, self.options.topic):
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
        refs = transactions.prepare(
            self.client,
            topic,
            [m for _, m in queue],
            recovery_ms=self.options.transaction_timeout_ms,
        )
        for (seq, _), ref in zip(queue, refs, strict=True):
            self.halves[seq] = ref

    def finish(self) -> TaskHalves:
        for topic in list(self.pending):
            self.flush(topic)
        return _task_halves(
            self.rows, self.first_send_ms, [self.halves[s] for s in sorted(self.halves)]
        )


def _task_halves(rows: int, first_send_ms: int, halves: list[HalfRef]) -> TaskHalves:
    partition, attempt, query_id, batch_id = _task_context()
    return TaskHalves(partition, attempt, rows, query_id, batch_id, first_send_ms, halves)


def _task_context() -> tuple[int, int, str, int]:
    """(partition id, attempt, streaming query id, micro-batch id) of the running task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:  # called outside a Spark task (unit tests)
        return 0, 0, "", -1
    batch = context.getLocalProperty("streaming.sql.batchId")
    return (
        context.partitionId(),
        context.attemptNumber(),
        context.getLocalProperty("sql.streaming.queryId") or "",
        int(batch) if batch and batch.lstrip("-").isdigit() else -1,
    )


def _id_base(options: SinkOptions) -> str:
    """What a task's message ids derive from: (streaming query id, or the driver's write
    id for a batch write; micro-batch id; partition) — the same when Spark retries it."""
    partition, _attempt, query_id, batch_id = _task_context()
    return f"{query_id or options.write_id}:{batch_id}:{partition}"


def _idempotent(options: SinkOptions, *, default: bool) -> SinkOptions:
    """``options`` with ``idempotent`` decided (``default`` when not given) and, when on,
    a write id of the driver's for writes without a query id."""
    on = default if options.idempotent is None else options.idempotent
    return dataclasses.replace(options, idempotent=on, write_id=uuid.uuid4().hex if on else "")


def _client(options: SinkOptions) -> RocketMQClient:
    """The client of the exactly-once sink (which takes exactly one endpoint)."""
    return RocketMQClient(
        options.endpoints[0],
        timeout_s=options.request_timeout_ms / 1000,
        **options.access.client_kwargs(),
    )


def write_partition(
    options: SinkOptions, plan: ColumnPlan, batches: Iterator[pa.RecordBatch]
) -> TaskHalves:
    """Send one partition's rows; with exactlyOnce as halves, reported in row order.

    If it raises, it rolls back the halves it already sent (best-effort); halves of a
    task that dies outright are rolled back by the broker's check-back.
    """
    if not options.exactly_once:
        targets = SinkTargets(
            options.endpoints,
            timeout_s=options.request_timeout_ms / 1000,
            namesrv=options.namesrv,
            access=options.access,
        )
        try:
            plain = _PlainTask(options, targets)
            for batch in batches:
                plain.add_batch(batch, plan)
            return plain.finish()
        finally:
            targets.close()
    client = _client(options)
    task = _HalfTask(options, client)
    try:
        for batch in batches:
            task.add_batch(batch, plan)
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

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            with _client(self.options) as client:
                exactly_once.commit_stream_batch(
                    client,
                    messages,
                    batchId,
                    producer_group=self.options.producer_group,
                    timeout_ms=self.options.transaction_timeout_ms,
                )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            with _client(self.options) as client:
                exactly_once.abort_stream_batch(
                    client, messages, batchId, producer_group=self.options.producer_group
                )


# --------------------------------------------------------------------------- entry points


def make_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> DataSourceWriter:
    """The batch writer for ``DataSource.writer``; checks options and columns first.

    A topic cannot be overwritten: ``mode("overwrite")`` is a ConfigError. Spark's default
    mode, ErrorIfExists, never gets here: Spark refuses it itself first
    (UNSUPPORTED_DATA_SOURCE_SAVE_MODE); ``mode("append")`` is the way (README, Save modes).
    """
    if overwrite:
        raise ConfigError(
            "save mode 'overwrite' is not supported by the rocketmq sink "
            "(messages are appended); use mode('append')"
        )
    parsed = _idempotent(parse_sink_options(options), default=False)
    return RocketMQBatchWriter(parsed, plan_columns(schema, parsed))


def make_stream_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> DataSourceStreamWriter:
    """The streaming writer for ``DataSource.streamWriter``; checks options and columns.

    ``overwrite`` (output mode complete) is accepted: every micro-batch's rows are sent,
    as Spark's Kafka sink does.
    """
    del overwrite
    parsed = _idempotent(parse_sink_options(options), default=True)
    plan = plan_columns(schema, parsed)
    if parsed.exactly_once:  # refuse before any row is sent, not at the first commit
        with _client(parsed) as client:
            exactly_once.require_admin_service(client)
    return RocketMQStreamWriter(parsed, plan)
