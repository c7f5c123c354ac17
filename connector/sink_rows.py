"""The sink's rows → message columns: Arrow batches in, aligned Python lists out (pure).

The at-least-once path hands :class:`MessageColumns` straight to the client's
``send_columns`` (``broker_core.client.wire`` encodes them: no object per row); the
exactly-once path turns them into ``OutgoingMessage`` s (:func:`rows_to_messages`).

A batch is checked before any of its rows is used, and a bad batch raises
InvalidArgumentError naming the column: a null or empty body, or a row without a topic
(the first such row, body before topic within a row), then a null key or null property
value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_core.client import OutgoingMessage
from broker_core.errors import InvalidArgumentError
from connector.sink_options import ColumnPlan


@dataclass(slots=True)
class MessageColumns:
    """Rows of one or more batches as aligned columns (None: the column is absent).

    ``keys`` rows are sequences of keys (None or empty: no key); ``properties`` rows are
    dicts or None; ``delivery_ms`` rows are epoch ms or None.
    """

    bodies: list[bytes]
    tags: list[str | None] | None = None
    keys: list[Sequence[str] | None] | None = None
    properties: list[dict[str, str] | None] | None = None
    message_groups: list[str | None] | None = None
    delivery_ms: list[int | None] | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    def _columns(self) -> list[list[Any] | None]:
        return [getattr(self, f.name) for f in fields(self)]

    def extend(self, other: MessageColumns) -> None:
        """Append ``other``'s rows (it has the same columns: both come from one plan)."""
        for mine, theirs in zip(self._columns(), other._columns(), strict=True):
            if mine is not None and theirs is not None:
                mine.extend(theirs)

    def _mapped(self, take: Callable[[list[Any]], list[Any]]) -> MessageColumns:
        return MessageColumns(
            take(self.bodies), *(None if c is None else take(c) for c in self._columns()[1:])
        )

    def rows(self, start: int, stop: int) -> MessageColumns:
        """Rows ``[start, stop)``."""
        return self._mapped(lambda column: column[start:stop])

    def pick(self, rows: list[int]) -> MessageColumns:
        """The given rows, in that order."""
        return self._mapped(lambda column: [column[i] for i in rows])

    def messages(self) -> Iterator[OutgoingMessage]:
        """One OutgoingMessage per row (keys as a tuple, () for none)."""
        blank = [None] * len(self.bodies)
        tags, keys, props, groups, times = (blank if c is None else c for c in self._columns()[1:])
        for row, body in enumerate(self.bodies):
            yield OutgoingMessage(
                body, tags[row], tuple(keys[row] or ()), props[row], groups[row], times[row]
            )


def _array(batch: pa.RecordBatch, name: str) -> pa.Array:
    return batch.column(batch.schema.get_field_index(name))


def _pylist(batch: pa.RecordBatch, name: str | None) -> list[Any] | None:
    return None if name is None else _array(batch, name).to_pylist()


def _first_true(flags: pa.Array) -> int | None:
    index = pc.index(pc.fill_null(flags, False), True).as_py()
    return None if index < 0 else int(index)


def _missing(column: pa.Array) -> pa.Array:
    """Per row: null or empty."""
    return pc.or_kleene(pc.is_null(column), pc.equal(pc.binary_length(column), 0))


def _first_null_inside(column: pa.Array, values: pa.Array | None, is_map: bool) -> int | None:
    """The first row of a list/map column holding a null key/value. ``values`` (its flat
    values, or None) answers "none" at once when it holds no null; else rows are looked at
    one by one (a sliced column's values may hold rows outside the slice)."""
    if values is not None and not values.null_count:
        return None
    for row, items in enumerate(column.to_pylist()):
        inside = dict(items).values() if is_map and items else items or ()
        if any(v is None for v in inside):
            return row
    return None


def first_bad_row(
    batch: pa.RecordBatch, plan: ColumnPlan, default_topic: str | None
) -> tuple[int, InvalidArgumentError] | None:
    """The first row the sink refuses and why (within a row: body, topic, keys, properties)."""
    body = _array(batch, plan.body)
    found: list[tuple[int, int, str]] = []  # (row, check, message)
    row = _first_true(_missing(body))
    if row is not None:
        state = "null" if body[row].as_py() is None else "empty"
        found.append((row, 0, f"column 'body' is {state} in a row; every message needs a body"))
    if default_topic is None and plan.topic is not None:  # plan_columns ensures one of them
        row = _first_true(_missing(_array(batch, plan.topic)))
        if row is not None:
            found.append(
                (row, 1, "column 'topic' is null in a row and the 'topic' option is not set")
            )
    if plan.keys is not None and plan.keys_is_list:
        keys = _array(batch, plan.keys)
        row = _first_null_inside(keys, pc.list_flatten(keys), is_map=False)
        if row is not None:
            found.append((row, 2, "column 'keys' holds a null key"))
    if plan.properties is not None:
        props = _array(batch, plan.properties)
        values = props.items if isinstance(props, pa.MapArray) else None
        row = _first_null_inside(props, values, is_map=True)
        if row is not None:
            found.append((row, 3, "column 'properties' holds a null value"))
    if not found:
        return None
    row, _, message = min(found)
    return row, InvalidArgumentError(message)


def _bodies(batch: pa.RecordBatch, plan: ColumnPlan) -> list[bytes]:
    column = _array(batch, plan.body)
    if plan.body_is_text:  # UTF-8 already: the cast only relabels the buffers
        column = pc.cast(
            column, pa.binary() if pa.types.is_string(column.type) else pa.large_binary()
        )
    return column.to_pylist()


def _keys(batch: pa.RecordBatch, plan: ColumnPlan) -> list[Sequence[str] | None] | None:
    if plan.keys is None:
        return None
    column = _array(batch, plan.keys)
    if not plan.keys_is_list:  # one key per row
        return [None if key is None else (key,) for key in column.to_pylist()]
    return column.to_pylist()


def _properties(batch: pa.RecordBatch, plan: ColumnPlan) -> list[dict[str, str] | None] | None:
    if plan.properties is None:
        return None
    # Arrow hands a map over as (key, value) pairs
    column = _array(batch, plan.properties).to_pylist()
    return [None if pairs is None else dict(pairs) for pairs in column]


def _epoch_ms(batch: pa.RecordBatch, plan: ColumnPlan) -> list[int | None] | None:
    if plan.delivery_timestamp is None:
        return None
    column = _array(batch, plan.delivery_timestamp)
    if not plan.delivery_is_timestamp:
        return column.to_pylist()
    per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
    ticks = pc.cast(column, pa.int64())
    return [None if t is None else int(t // per_ms) for t in ticks.to_pylist()]


def batch_columns(
    batch: pa.RecordBatch, plan: ColumnPlan, default_topic: str | None
) -> tuple[list[str] | str, MessageColumns, InvalidArgumentError | None]:
    """(each row's topic or the one topic of all rows, the rows as columns, the error).

    ``default_topic`` (the sink's ``topic`` option) is every row's topic when set, whatever
    the ``topic`` column says.

    With a bad row (see :func:`first_bad_row`) the columns hold the rows before it and
    the error is what the caller raises once it has handled them (as a row-by-row sink
    would have sent them first).
    """
    bad = first_bad_row(batch, plan, default_topic)
    if bad is not None:
        batch = batch.slice(0, bad[0])
    columns = MessageColumns(
        _bodies(batch, plan),
        _pylist(batch, plan.tag),
        _keys(batch, plan),
        _properties(batch, plan),
        _pylist(batch, plan.message_group),
        _epoch_ms(batch, plan),
    )
    error = None if bad is None else bad[1]
    if default_topic is not None:  # the option wins over the column, as in Spark's Kafka sink
        return default_topic, columns, error
    assert plan.topic is not None  # plan_columns ensures a topic column or option
    return _array(batch, plan.topic).to_pylist(), columns, error


def columns_by_topic(
    batch: pa.RecordBatch, plan: ColumnPlan, default_topic: str | None
) -> tuple[dict[str, MessageColumns], InvalidArgumentError | None]:
    """The rows per topic, each topic's rows in row order, and the error, as for
    :func:`batch_columns` (pure)."""
    topics, columns, error = batch_columns(batch, plan, default_topic)
    if isinstance(topics, str):
        return {topics: columns}, error
    rows: dict[str, list[int]] = {}
    for row, topic in enumerate(topics):
        rows.setdefault(topic, []).append(row)
    if len(rows) <= 1:
        return {topic: columns for topic in rows}, error
    return {topic: columns.pick(picked) for topic, picked in rows.items()}, error


def rows_to_messages(
    batch: pa.RecordBatch, plan: ColumnPlan, default_topic: str | None
) -> Iterator[tuple[str, OutgoingMessage]]:
    """(topic, message) for every row of ``batch``, in row order (pure).

    Raises InvalidArgumentError naming the column for a null or empty body, a row with
    no topic, or a null inside keys/properties, after yielding the rows before it.
    """
    topics, columns, error = batch_columns(batch, plan, default_topic)
    for row, message in enumerate(columns.messages()):
        yield (topics if isinstance(topics, str) else topics[row]), message
    if error is not None:
        raise error
