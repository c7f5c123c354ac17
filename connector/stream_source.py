"""``spark.readStream.format("rocketmq")``: micro-batches over message queues.

Offsets are the JSON of :mod:`connector.offsets` (``{topic: {"broker-a:0": next}}``),
so Spark's checkpoint holds one position per queue and a restarted query continues
exactly there. Each trigger the driver asks every broker for each subscribed topic's
queue bounds (one ``TopicStatus`` call per broker and topic, plus ``ListTopics`` for a
``topicPattern``; with ``namesrv`` also one route lookup per topic): queues added to a
topic, broker groups that join its route, and topics that start matching the pattern,
join the next batch from their first offset (0). A checkpointed queue that no broker
serves any more is reported as possible data loss (``failOnDataLoss``).

Admission control (Spark ≥ 4.2): :meth:`RocketMQStreamReader.getDefaultReadLimit` turns
the ``*PerTrigger`` options into a :class:`ReadLimit`; :meth:`latestOffset` honours the
limit Spark passes (``ReadAllAvailable`` overrides the options, as the contract says)
and splits a message budget across queues in proportion to their backlog.
``Trigger.AvailableNow`` reads up to the positions recorded in
:meth:`prepareForTriggerAvailableNow`, in rate-limited batches, then stops.

State: the reader object on the driver keeps the broker clients, the available-now
target and the time of the last trigger (for ``maxTriggerDelay``); none of it is needed
for correctness after a restart. ``read`` is stateless (see ``source.read_range``) and
``commit`` is idempotent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from broker_core.errors import InvalidOffsetError, OffsetOutOfRangeError
from connector import positions
from connector.arrow import arrow_schema_of, message_size_bytes
from connector.brokers import Bounds, BrokerSet
from connector.offsets import Offsets, QueueRef, from_json, split_budget, to_json
from connector.options import ReadOptions
from connector.partitioning import split_ranges
from connector.routes import open_brokers
from connector.source import (
    QueueRange,
    data_loss,
    read_range,
    resolve,
    settings_of,
)

log = logging.getLogger(__name__)

SAMPLE_MESSAGES_PER_QUEUE: Final = 16
CHECKPOINT: Final = "checkpointed offset"


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; constructing it is cheap and touches no network."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.settings = settings_of(options)
        self._brokers: BrokerSet | None = None
        self._target: Offsets | None = None  # set by prepareForTriggerAvailableNow
        self._latest: Offsets | None = None  # what the last latestOffset saw
        self._committed: Offsets | None = None  # what commitOffsets last stored
        self._gone: set[QueueRef] = set()  # queues reported as no longer served
        self._last_trigger_s = time.monotonic()

    @property
    def brokers(self) -> BrokerSet:
        if self._brokers is None:
            self._brokers = open_brokers(self.options)
        return self._brokers

    def _discover(self, *, planning: bool = False) -> Bounds:
        """Bounds of the queues read (``planning``: a new query, so an assigned queue
        that is missing is an error rather than data loss)."""
        return positions.discover(self.options, self.brokers, require_assigned=planning)

    # ---- offsets -----------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a new query starts: ``startingOffsets`` / ``startingTimestamp`` resolved."""
        bounds = self._discover(planning=True)
        return to_json(resolve(self.options.starting, bounds, self.brokers))

    def prepareForTriggerAvailableNow(self) -> None:
        """Record every queue's current end: an available-now run reads no further."""
        self._target = {ref: high for ref, (_, high) in self._discover().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit the options ask for (Spark has no composite limit for Python sources:
        the others configured still apply in :meth:`latestOffset`)."""
        opts = self.options
        if opts.max_messages_per_trigger is not None:
            return ReadMaxRows(opts.max_messages_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        if opts.min_messages_per_trigger is not None:
            return ReadMinRows(opts.min_messages_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        """Every queue's end as the last :meth:`latestOffset` saw it (None before the
        first): Spark shows it as the source's ``latestOffset`` in the query progress, so
        the backlog per queue is ``latestOffset - endOffset``."""
        return None if self._latest is None else to_json(self._latest)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch: ``start`` moved on by what ``limit`` admits.

        Returns ``start`` unchanged when there is nothing to read (or when
        ``minMessagesPerTrigger`` is not reached and ``maxTriggerDelay`` has not passed).
        """
        begin = from_json(start, what=CHECKPOINT)
        self._commit(begin)
        bounds = self._discover()
        self._report_gone(begin, bounds)
        available = {ref: high for ref, (_, high) in bounds.items()}
        if self._target is not None:
            available = {
                ref: min(high, self._target[ref])
                for ref, high in available.items()
                if ref in self._target
            }
        self._latest = {**begin, **available}
        firsts = {ref: self._first(ref, begin.get(ref, 0), bounds[ref]) for ref in available}
        backlog = {ref: max(0, available[ref] - firsts[ref]) for ref in available}
        take = self._admit(backlog, limit, firsts)
        end = {
            **begin,
            **{ref: max(firsts[ref] + take[ref], begin.get(ref, 0)) for ref in available},
        }
        if to_json(end) != to_json(begin):
            self._last_trigger_s = time.monotonic()
        return to_json(end)

    def _report_gone(self, begin: Offsets, bounds: Bounds) -> None:
        """Queues of subscribed topics in ``begin`` that no broker serves any more: their
        broker group left the route (or the endpoint), or the topic lost them.

        Unread messages there may be lost: with failOnDataLoss an OffsetOutOfRangeError,
        else one warning per queue. Their offsets stay in the checkpoint, so a group that
        comes back is read on from where the query left it.
        """
        self._gone -= bounds.keys()  # back again: report it if it leaves once more
        gone = sorted(
            ref
            for ref in begin
            if ref not in bounds and ref not in self._gone and self.options.matches_topic(ref.topic)
        )
        if not gone:
            return
        text = (
            f"rocketmq source: possible data loss: {', '.join(map(str, gone))} "
            f"(checkpointed at {', '.join(str(begin[r]) for r in gone)}) no longer "
            f"served: the broker group left the topic's route, or the queue was removed"
        )
        if self.settings.fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{text}. Set failOnDataLoss=false to continue without them.",
                min_offset=-1,
                max_offset=-1,
            )
        log.warning("%s; continuing without them (failOnDataLoss=false)", text)
        self._gone.update(gone)

    def _first(self, ref: QueueRef, offset: int, bounds: tuple[int, int]) -> int:
        """Where ``ref`` really resumes: ``offset``, unless retention or a reset moved it."""
        low, high = bounds
        if offset < low:
            data_loss(ref, offset, low, self.settings, "were removed by retention")
            return low
        if offset > high:
            data_loss(
                ref,
                high,
                offset,
                self.settings,
                f"were read, but the queue now ends at {high} (it was recreated)",
            )
            return offset
        return offset

    def _admit(
        self, backlog: dict[QueueRef, int], limit: ReadLimit, firsts: dict[QueueRef, int]
    ) -> dict[QueueRef, int]:
        """Messages each queue may contribute under ``limit`` and the options."""
        if isinstance(limit, ReadAllAvailable):
            return backlog
        opts, total = self.options, sum(backlog.values())
        least = opts.min_messages_per_trigger
        if isinstance(limit, ReadMinRows):
            least = limit.min_rows
        waited_s = time.monotonic() - self._last_trigger_s
        if (
            least is not None
            and total < least
            and self._target is None
            and waited_s * 1000 < opts.max_trigger_delay_ms
        ):
            return dict.fromkeys(backlog, 0)
        budgets = [opts.max_messages_per_trigger]
        if isinstance(limit, ReadMaxRows):
            budgets.append(limit.max_rows)
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        for cap in (max_bytes, opts.max_bytes_per_trigger):
            if cap is not None and total:
                budgets.append(self._messages_in_bytes(cap, backlog, firsts))
        given = [b for b in budgets if b is not None]
        return split_budget(backlog, min(given)) if given else backlog

    def _messages_in_bytes(
        self, max_bytes: int, backlog: dict[QueueRef, int], firsts: dict[QueueRef, int]
    ) -> int:
        """How many messages fit in ``max_bytes``, from a sample at each queue's start.

        A soft limit (as Spark's ``maxBytesPerTrigger`` of file sources): sizes are
        body + tag + keys + properties of up to 16 messages per queue; at least one
        message is always admitted so the query makes progress.
        """
        sampled, weight = 0, 0
        for ref in sorted(ref for ref, n in backlog.items() if n):
            client = self.brokers.client_of(ref.broker)
            try:
                batch = client.pull(
                    self.options.consumer_group,
                    ref.topic,
                    ref.queue_id,
                    firsts[ref],
                    min(backlog[ref], SAMPLE_MESSAGES_PER_QUEUE),
                    filter_expression=self.options.filter_expression,
                    filter_type=self.options.filter_type,
                    with_bounds=False,
                )
            except InvalidOffsetError:
                continue  # retention moved the queue meanwhile; read() decides about it
            sampled += len(batch.messages)
            weight += sum(message_size_bytes(m) for m in batch.messages)
        if not sampled or not weight:
            return sum(backlog.values())
        return max(1, max_bytes * sampled // weight)

    # ---- planning and reading --------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One :class:`QueueRange` per queue that moved (cut by ``minPartitions`` /
        ``maxMessagesPerPartition``); a queue new in ``end`` starts at 0."""
        begin, stop = from_json(start, what=CHECKPOINT), from_json(end, what=CHECKPOINT)
        opts = self.options
        ranges = [
            QueueRange(
                self.brokers.endpoint_of(ref.broker),
                ref,
                begin.get(ref, 0),
                last,
                opts.filter_expression,
                opts.filter_type,
                opts.access,
            )
            for ref, last in sorted(stop.items())
            if begin.get(ref, 0) < last
        ]
        return split_ranges(ranges, opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRange), f"not our partition: {partition!r}"
        return read_range(partition, self.settings, arrow_schema_of(self.schema))

    def commit(self, end: dict) -> None:
        """With ``commitOffsets``, store ``end`` as the consumer group's broker offsets,
        so ``rmq group progress`` shows the query's lag. Idempotent."""
        self._commit(from_json(end, what=CHECKPOINT))

    def _commit(self, processed: Offsets) -> None:
        """Commit ``processed`` unless it was the last thing committed.

        Spark calls ``commit(end of batch N)`` only while it plans batch N + 1, so the
        last batch of an available-now run would never be committed. ``latestOffset`` is
        called with the end of the last batch the sink finished (a batch replayed after
        a restart is re-run before it), so it commits that ``start`` too.
        """
        if self.options.commit_offsets and processed != self._committed:
            self.brokers.commit(self.options.consumer_group, processed)
            self._committed = dict(processed)

    def stop(self) -> None:
        if self._brokers is not None:
            self._brokers.close()
