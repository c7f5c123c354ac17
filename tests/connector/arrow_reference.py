"""Reference record batches built message by message (test-only).

``connector.arrow.units_to_record_batch`` builds the source's rows from bulk-decoded units
with Arrow kernels; this builds the same rows from ``ReceivedMessage`` objects with Python
lists, so tests can compare the fast path with the obvious one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from broker_core.client.model import ReceivedMessage
from connector.arrow import US_PER_MS


def to_record_batch(
    messages: Sequence[ReceivedMessage],
    broker: str,
    schema: pa.Schema,
    *,
    include_properties: bool = True,
) -> pa.RecordBatch:
    """One record batch of ``messages`` (all from ``broker``) with exactly ``schema``."""
    columns: list[list[Any]] = [
        [m.topic for m in messages],
        [broker] * len(messages),
        [m.queue_id for m in messages],
        [m.queue_offset for m in messages],
        [m.message_id for m in messages],
        [m.tag for m in messages],
        [list(m.keys) for m in messages],
        [m.body for m in messages],
        [list(m.properties.items()) if include_properties else None for m in messages],
        [m.born_timestamp_ms * US_PER_MS for m in messages],
        [m.store_timestamp_ms * US_PER_MS for m in messages],
        [m.message_group for m in messages],
    ]
    arrays = [pa.array(values, type=schema.field(i).type) for i, values in enumerate(columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
