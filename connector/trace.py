"""Message trace from Spark (option ``trace``, off by default): which micro-batch wrote or
read which message.

The sink writes, per send request, a trace message holding a ``Pub`` record for each
message it stored; the source writes, per pull, a ``SubBefore`` record for each message a
partition read. Both use RocketMQ's trace data format (``broker_core.protocol.trace``)
and go to ``RMQ_SYS_TRACE_TOPIC`` of the broker the rows went to or came from (it needs
``trace_topic_enable`` or broker tracing on), keyed by the message ids, so
``rmq message trace ID`` shows them beside the broker's own records. The Spark context
is in the records' group (``spark``) and their request id / region:
``query=Q batch=B partition=P`` (sink) and ``query=Q batch=B partition=P offsets=S-E``
(source).

A trace write is part of the task: if it fails, the task fails (and Spark retries it),
so a trace is never silently missing while the option is on.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

from broker_core.client import RocketMQClient, SendReceipt
from broker_core.clock import now_ms
from broker_core.protocol.trace import TRACE_TOPIC, TraceRecord, encode

GROUP = "spark"
RECORDS_PER_MESSAGE = 64


@dataclass(frozen=True, slots=True)
class SparkContext:
    """Where in Spark a task runs: streaming query id ("" for a batch job), micro-batch
    id (-1 outside a micro-batch) and partition id."""

    query_id: str
    batch_id: int
    partition: int

    def describe(self) -> str:
        return f"query={self.query_id or '-'} batch={self.batch_id} partition={self.partition}"


def spark_context() -> SparkContext:
    """The running task's :class:`SparkContext` (``("", -1, 0)`` outside a Spark task)."""
    from pyspark import TaskContext

    task = TaskContext.get()
    if task is None:
        return SparkContext("", -1, 0)
    batch = task.getLocalProperty("streaming.sql.batchId")
    return SparkContext(
        task.getLocalProperty("sql.streaming.queryId") or "",
        int(batch) if batch and batch.lstrip("-").isdigit() else -1,
        task.partitionId(),
    )


def pub_records(
    context: SparkContext,
    topic: str,
    receipts: Sequence[SendReceipt],
    body_lengths: Sequence[int],
    sent_ms: int,
    cost_ms: int,
) -> list[TraceRecord]:
    """A Pub per stored message of one send request (``receipts`` in request order)."""
    host = socket.gethostname()
    return [
        TraceRecord(
            "Pub",
            sent_ms,
            context.describe(),
            GROUP,
            topic,
            r.message_id,
            body_length=length,
            cost_ms=cost_ms,
            client_host=host,
        )
        for r, length in zip(receipts, body_lengths, strict=True)
    ]


def read_records(
    context: SparkContext, message_ids: Sequence[str], start: int, end: int
) -> list[TraceRecord]:
    """A SubBefore per message one pull of offsets ``[start, end)`` read."""
    at = now_ms()
    request = f"{context.describe()} offsets={start}-{end}"
    return [
        TraceRecord("SubBefore", at, "spark", GROUP, msg_id=m, request_id=request)
        for m in message_ids
    ]


def write(client: RocketMQClient, records: Sequence[TraceRecord]) -> None:
    """Send ``records`` to the trace topic, the message ids as each message's keys."""
    for i in range(0, len(records), RECORDS_PER_MESSAGE):
        chunk = records[i : i + RECORDS_PER_MESSAGE]
        keys = list(dict.fromkeys(r.msg_id for r in chunk))
        client.send(TRACE_TOPIC, encode(chunk).encode(), keys=keys)
