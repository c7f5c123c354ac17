"""Reading queues: offset resolution, one partition's read, the batch reader.

* The driver's view of the brokers (:class:`~connector.brokers.BrokerSet`) lives in
  :mod:`connector.brokers`; :func:`resolve` turns an offset option into offsets with it.
* :class:`QueueRange` is one Spark partition: one queue, ``[start, end)``, the endpoint
  to pull from and the broker-side filter.
* :func:`read_range` is what an executor runs for a partition: it opens its own channel,
  pulls exactly ``[start, end)`` and yields one ``pyarrow.RecordBatch`` per pull. It is
  stateless and idempotent: the same partition always yields the same messages (minus
  what retention removed, see ``failOnDataLoss``).
* :class:`RocketMQBatchReader` plans one partition per queue with work and pushes
  ``tag = …`` / ``tag IN (…)`` to the broker, and ``topic``/``broker``/``queueId``
  equalities and ``queueOffset`` bounds into the plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from broker_core.client import RocketMQClient
from broker_core.client.columnar import UnitColumns, split_properties
from broker_core.errors import (
    ConfigError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    RocketMQError,
)
from connector import positions, trace
from connector.arrow import arrow_schema_of, units_to_record_batch
from connector.brokers import REQUEST_TIMEOUT_S, Bounds, BrokerSet
from connector.credentials import NO_ACCESS, Access
from connector.offsets import EARLIEST, LATEST, Offsets, QueueRef
from connector.options import OffsetSpec, ReadOptions
from connector.partitioning import split_ranges
from connector.routes import open_brokers

log = logging.getLogger(__name__)

PULL_MAX_BYTES: Final = 8 << 20  # per bulk pull: one Arrow batch of about this size
STALL_TIMEOUT_S: Final = 10.0  # a partition that moves no offset for this long fails
STALL_SLEEP_S: Final = 0.05


@dataclass(frozen=True)
class ReadSettings:
    """What every partition read shares; immutable and picklable."""

    group: str
    fail_on_data_loss: bool
    include_properties: bool
    trace: bool = False  # a SubBefore trace record per message read (connector/trace.py)


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One partition: messages ``[start, end)`` of one queue, pulled from ``endpoint``."""

    endpoint: str
    ref: QueueRef
    start: int
    end: int
    filter_expression: str | None = None
    filter_type: str = "TAG"
    access: Access = NO_ACCESS  # credentials and TLS (connector/credentials.py)


def data_loss(
    ref: QueueRef, lost_from: int, lost_to: int, settings: ReadSettings, reason: str
) -> None:
    """Fail with OffsetOutOfRangeError (failOnDataLoss) or log that ``[from, to)`` is lost."""
    text = (
        f"rocketmq source: data loss in {ref}: offsets [{lost_from}, {lost_to}) {reason} "
        f"before they were read"
    )
    if settings.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{text}. Set failOnDataLoss=false to skip them and continue.",
            min_offset=lost_to,
            max_offset=lost_to,
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", text)


def _after_illegal_offset(
    part: QueueRange, offset: int, exc: InvalidOffsetError, settings: ReadSettings
) -> int:
    """Where to continue after the broker refused ``offset`` (``end`` = give up)."""
    moved_to = exc.next_offset
    if moved_to is not None and moved_to > offset:  # below the queue's minimum now
        data_loss(part.ref, offset, min(moved_to, part.end), settings, "were removed by retention")
        return min(moved_to, part.end)
    data_loss(
        part.ref,
        offset,
        part.end,
        settings,
        f"are beyond the queue's end ({moved_to}): the queue was reset",
    )
    return part.end


def _after_stall(
    client: RocketMQClient, part: QueueRange, offset: int, stalled_s: float, settings: ReadSettings
) -> int:
    """An empty pull inside ``[start, end)``: retention moved the queue, or a slow broker.

    Bounded by time, not by a count of tries: ``stalled_s`` is how long the partition has
    made no progress, and past ``STALL_TIMEOUT_S`` it fails (each call here can itself
    take up to the client's timeout and retries).
    """
    low = client.query_offset(part.ref.topic, part.ref.queue_id, "BEGINNING")
    high = client.query_offset(part.ref.topic, part.ref.queue_id, "END")
    if low > offset:
        data_loss(part.ref, offset, min(low, part.end), settings, "were removed by retention")
        return min(low, part.end)
    if high <= offset:
        data_loss(
            part.ref,
            offset,
            part.end,
            settings,
            f"are beyond the queue's end ({high}): the queue was reset",
        )
        return part.end
    if stalled_s >= STALL_TIMEOUT_S:
        raise RocketMQError(
            f"rocketmq source: {part.ref} returned nothing at offset {offset} "
            f"for {stalled_s:.1f} s although it holds [{low}, {high})"
        )
    time.sleep(STALL_SLEEP_S)
    return offset


def read_range(
    part: QueueRange, settings: ReadSettings, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the messages ``[part.start, part.end)`` of one queue, one batch per pull.

    Opens (and closes) its own client, so it runs anywhere the partition is shipped.
    Pulls are bulk pulls (``pull_columns``: units checked for CRCs, queue and order, and
    decoded as columns; standard PullMessage on an endpoint without our services).
    Messages the broker filters out are skipped but still counted as read.
    """
    client = RocketMQClient(
        part.endpoint, timeout_s=REQUEST_TIMEOUT_S, **part.access.client_kwargs()
    )
    ref, offset, stalled_since = part.ref, part.start, None
    try:
        while offset < part.end:
            try:
                batch = client.pull_columns(
                    settings.group,
                    ref.topic,
                    ref.queue_id,
                    offset,
                    part.end - offset,
                    max_bytes=PULL_MAX_BYTES,
                    filter_expression=part.filter_expression,
                    filter_type=part.filter_type,
                )
            except InvalidOffsetError as exc:
                offset = _after_illegal_offset(part, offset, exc, settings)
                continue
            if batch.count:
                cols = batch.columns  # checked: this queue, offsets rising from ``offset``
                # A filtered pull counts matches, so it may run past the range's end.
                keep = int(np.searchsorted(cols.queue_offset, part.end))
                if keep:
                    rows = units_to_record_batch(
                        cols, ref.broker, schema, include_properties=settings.include_properties
                    )
                    if settings.trace:
                        _trace_read(client, cols, keep, offset)
                    yield rows if keep == cols.count else rows.slice(0, keep)
            if batch.next_offset > offset:
                offset, stalled_since = batch.next_offset, None
            else:
                stalled_since = stalled_since or time.monotonic()
                offset = _after_stall(
                    client, part, offset, time.monotonic() - stalled_since, settings
                )
    finally:
        client.close()


def _trace_read(client: RocketMQClient, cols: UnitColumns, keep: int, start: int) -> None:
    """SubBefore records of the ``keep`` messages one pull read (option ``trace``)."""
    ids = split_properties(cols).message_id.to_pylist()[:keep]
    end = int(cols.queue_offset[keep - 1]) + 1
    trace.write(client, trace.read_records(trace.spark_context(), ids, start, end))


def resolve(spec: OffsetSpec, bounds: Bounds, brokers: BrokerSet) -> Offsets:
    """Concrete offsets of ``spec`` for every queue in ``bounds``.

    JSON offsets naming a queue that is not subscribed are a ConfigError naming the option.
    """
    unknown = sorted(set(spec.offsets) - set(bounds))
    if unknown:
        raise ConfigError(
            f"option {spec.option!r}: {', '.join(map(str, unknown))} "
            f"is not a queue of the subscribed topics"
        )
    if spec.kind in ("timestamp", "timestamps"):
        return positions.resolve_times(spec, bounds, brokers)
    if spec.kind == "group":
        return positions.resolve_group(spec, bounds, brokers)
    default = (
        EARLIEST
        if spec.kind == "earliest" or (spec.kind == "offsets" and spec.default == "earliest")
        else LATEST
    )
    out: Offsets = {}
    for ref, (low, high) in bounds.items():
        wanted = spec.offsets.get(ref, default)
        out[ref] = low if wanted == EARLIEST else high if wanted == LATEST else wanted
    return out


def settings_of(options: ReadOptions) -> ReadSettings:
    return ReadSettings(
        options.consumer_group,
        options.fail_on_data_loss,
        options.include_properties,
        options.trace,
    )


# ---- batch reads -------------------------------------------------------------------------

_PRUNE_COLUMNS: Final = {("topic",): 0, ("broker",): 1, ("queueId",): 2}


def _literal_set(flt: Filter, kinds: tuple[type, ...]) -> frozenset[Any] | None:
    """The values ``col = v`` / ``col IN (…)`` allows, if all are of ``kinds``."""
    values = (flt.value,) if isinstance(flt, EqualTo) else flt.value if isinstance(flt, In) else ()
    ok = values and all(isinstance(v, kinds) and not isinstance(v, bool) for v in values)
    return frozenset(values) if ok else None


def _pushable_tag(tag: Any) -> bool:
    return isinstance(tag, str) and bool(tag) and tag == tag.strip() and "|" not in tag


@dataclass(frozen=True)
class Pushed:
    """The filters a batch read took over: allowed values per column and offset bounds."""

    tags: frozenset[str] | None = None
    queues: tuple[frozenset[Any] | None, ...] = (None, None, None)  # topic, broker, queueId
    min_offset: int = 0
    max_offset: int | None = None  # exclusive

    def take(self, flt: Filter) -> Pushed | None:
        """This plus ``flt``, or None when ``flt`` cannot be pushed."""
        column = getattr(flt, "attribute", None)
        if column == ("tag",):
            tags = _literal_set(flt, (str,))
            if tags is None or not all(_pushable_tag(t) for t in tags):
                return None
            return replace(self, tags=tags if self.tags is None else self.tags & tags)
        if column in _PRUNE_COLUMNS:
            index = _PRUNE_COLUMNS[column]
            allowed = _literal_set(flt, (int,) if index == 2 else (str,))
            if allowed is None:
                return None
            old = self.queues[index]
            queues = list(self.queues)
            queues[index] = allowed if old is None else old & allowed
            return replace(self, queues=tuple(queues))
        return self._take_offset(flt) if column == ("queueOffset",) else None

    def _take_offset(self, flt: Filter) -> Pushed | None:
        value = getattr(flt, "value", None)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        low, high = {
            GreaterThan: (value + 1, None),
            GreaterThanOrEqual: (value, None),
            LessThan: (0, value),
            LessThanOrEqual: (0, value + 1),
            EqualTo: (value, value + 1),
        }.get(type(flt), (None, None))
        if low is None:
            return None
        top = high if self.max_offset is None or high is None else min(high, self.max_offset)
        return replace(
            self,
            min_offset=max(self.min_offset, low),
            max_offset=self.max_offset if high is None else top,
        )

    def admits(self, ref: QueueRef) -> bool:
        return all(
            allowed is None or value in allowed
            for allowed, value in zip(self.queues, ref, strict=True)
        )


class _PushFilters:
    """``pushFilters`` that does not break reads when Spark's pushdown config is off.

    With ``spark.sql.python.filterPushdown.enabled=false`` (Spark's default), pyspark
    refuses a reader whose ``pushFilters`` is not the base method, judged by the method's
    ``__func__``. This callable presents the base method's ``__func__`` to that check, so
    plain reads work and Spark filters the rows itself; with the config on, Spark calls it
    and the tag filters go to the broker.
    """

    __func__ = staticmethod(DataSourceReader.pushFilters)  # the plain function, not bound

    def __init__(self, push: Callable[[list[Filter]], list[Filter]]) -> None:
        self._push = push

    def __call__(self, filters: list[Filter]) -> list[Filter]:
        return self._push(filters)


class RocketMQBatchReader(DataSourceReader):
    """``spark.read.format("rocketmq")``: one partition per queue with messages in range.

    Planning (``partitions``) runs once on the driver and reads each queue's bounds;
    ``read`` is stateless (see :func:`read_range`).
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.settings = settings_of(options)
        self.pushed = Pushed()

    @property
    def pushFilters(self) -> _PushFilters:
        """Filter pushdown, used only when Spark's pushdown config is on (see _PushFilters)."""
        return _PushFilters(self._push_filters)

    def _push_filters(self, filters: list[Filter]) -> list[Filter]:
        """Take what the broker or the plan can answer exactly; return the rest."""
        rest = []
        for flt in filters:
            taken = self.pushed.take(flt)
            is_tag = getattr(flt, "attribute", None) == ("tag",)
            if taken is None or (is_tag and self.options.filter_type == "SQL"):
                rest.append(flt)  # a pull has one filter: SQL and tags do not combine
            else:
                self.pushed = taken
        return rest

    def _filter(self) -> tuple[str | None, str, bool]:
        """(expression, type, anything left) of the broker-side filter."""
        tags = self.options.tags
        if self.pushed.tags is not None:
            tags = self.pushed.tags if tags is None else tags & self.pushed.tags
        if tags is None:
            return self.options.filter_expression, self.options.filter_type, True
        return "||".join(sorted(tags)), "TAG", bool(tags)

    def partitions(self) -> list[QueueRange]:
        """One :class:`QueueRange` per queue with work in ``[starting, ending)``."""
        expression, filter_type, any_tag = self._filter()
        brokers = open_brokers(self.options)
        try:
            ranges = plan_batch(self.options, brokers)
            pruned = [
                replace(r, filter_expression=expression, filter_type=filter_type)
                for r in self._pruned(ranges)
                if any_tag
            ]
            return split_ranges(pruned, self.options)
        finally:
            brokers.close()

    def _pruned(self, ranges: list[QueueRange]) -> Iterator[QueueRange]:
        top = self.pushed.max_offset
        for r in ranges:
            start = max(r.start, self.pushed.min_offset)
            end = r.end if top is None else min(r.end, top)
            if self.pushed.admits(r.ref) and start < end:
                yield replace(r, start=start, end=end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, QueueRange):
            return iter(())  # Spark's placeholder partition when the plan is empty
        return read_range(partition, self.settings, arrow_schema_of(self.schema))


def plan_batch(options: ReadOptions, brokers: BrokerSet) -> list[QueueRange]:
    """The ranges a batch read covers; ConfigError for inconsistent start/end options."""
    assert options.ending is not None, "a batch read always has an ending"
    bounds = positions.discover(options, brokers, require_assigned=True)
    start = resolve(options.starting, bounds, brokers)
    end = resolve(options.ending, bounds, brokers)
    settings = settings_of(options)
    ranges = []
    for ref in sorted(bounds):
        low, high = bounds[ref]
        first, last = start[ref], end[ref]
        if last > high:
            raise ConfigError(
                f"option {options.ending.option!r}: end {last} of {ref} is "
                f"beyond the queue's end {high}"
            )
        if first > last:
            raise ConfigError(
                f"option {options.starting.option!r}: start {first} of {ref} "
                f"is after its end {last} ({options.ending.option})"
            )
        if first < min(low, last):
            data_loss(ref, first, min(low, last), settings, "were removed by retention")
            first = min(low, last)
        if first < last:
            ranges.append(
                QueueRange(brokers.endpoint_of(ref.broker), ref, first, last, access=brokers.access)
            )
    return ranges
