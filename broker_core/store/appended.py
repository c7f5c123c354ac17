"""What one commitlog append hands to dispatch, as columns (both send lanes build it).

``appended_rows`` builds it from a general batch (one ``EncodedMessage`` and
``AppendResult`` per message), ``appended_columns`` from a column batch; dispatch
applies either the same way: one consume-queue block per queue, one index block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.columns import ColumnBatch

if TYPE_CHECKING:
    from broker_core.store.commitlog import AppendResult


@dataclass(slots=True)
class Appended:
    """One append as dispatch needs it: where each message went, as columns.

    ``queues`` maps each (topic, queue id) to the rows of its messages, in order (rows
    of prepared or rolled-back transaction units are in no queue); ``index_keys`` and
    ``index_phys`` list the messages that have index keys.
    """

    before: int  # commitlog offset before the append
    after: int  # and after it
    store_timestamp_ms: int
    queues: dict[tuple[str, int], list[int]]
    physical_offset: np.ndarray  # int64 per message
    size: np.ndarray  # int32
    tags_code: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    index_keys: list[list[str]]
    index_phys: list[int]


def appended_rows(
    before: int,
    after: int,
    now_ms: int,
    batch: list[codec.EncodedMessage],
    results: list[AppendResult],
) -> Appended:
    queues: dict[tuple[str, int], list[int]] = {}
    keys: list[list[str]] = []
    key_phys: list[int] = []
    for row, (enc, res) in enumerate(zip(batch, results, strict=True)):
        if (enc.sys_flag & layout.SYSFLAG_TRANSACTION_MASK) not in layout.NOT_IN_QUEUE:
            queues.setdefault((enc.topic, enc.queue_id), []).append(row)
        if enc.index_keys:
            keys.append(enc.index_keys)
            key_phys.append(res.physical_offset)
    return Appended(
        before,
        after,
        now_ms,
        queues,
        np.array([r.physical_offset for r in results], np.int64),
        np.array([r.size for r in results], np.int32),
        np.array([e.tags_code for e in batch], np.int64),
        np.array([r.queue_offset for r in results], np.int64),
        keys,
        key_phys,
    )


def appended_columns(
    before: int,
    after: int,
    now_ms: int,
    batch: ColumnBatch,
    offsets: np.ndarray,
    starts: np.ndarray,
) -> Appended:
    queues: dict[tuple[str, int], list[int]] = {}
    order = np.argsort(batch.queue_ids, kind="stable")
    ids = batch.queue_ids[order]
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    for rows in np.split(order, cuts):
        if len(rows):
            queues[(batch.topic, int(batch.queue_ids[rows[0]]))] = rows.tolist()
    with_keys = [i for i, keys in enumerate(batch.index_keys) if keys]
    return Appended(
        before,
        after,
        now_ms,
        queues,
        starts,
        batch.sizes.astype(np.int32),
        batch.tags_codes,
        offsets,
        [batch.index_keys[i] for i in with_keys],
        starts[with_keys].tolist(),
    )
