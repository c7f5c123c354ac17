"""What one commitlog append hands to dispatch, as columns: the one dispatch record.

``CommitLog.append`` builds it from the batch it just packed (whose header records now
hold every message's queue and physical offset); dispatch applies it as one
consume-queue block per queue and one index block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_core.store.columns import ColumnBatch, QueueKey


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
    queues: dict[QueueKey, list[int]]
    physical_offset: np.ndarray  # int64 per message
    size: np.ndarray  # int64
    tags_code: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    index_keys: list[list[str]]
    index_phys: list[int]
    born_timestamp_ms: np.ndarray | None = None  # int64 per message (trace: a store's cost)
    id_text: str | None = None  # ``ColumnBatch.id_text`` (trace reads the ids there)


def appended(
    before: int, after: int, now_ms: int, batch: ColumnBatch, queues: dict[QueueKey, list[int]]
) -> Appended:
    """The record of ``batch`` once packed (its headers filled) between ``before`` and
    ``after``; ``queues`` is ``batch.queue_rows()``."""
    phys = batch.physical_offsets
    keys = batch.index_keys
    if all(keys):  # the usual case: every message has at least its id
        index_keys, index_phys = keys, phys.tolist()
    else:
        with_keys = [row for row, row_keys in enumerate(keys) if row_keys]
        index_keys = [keys[row] for row in with_keys]
        index_phys = phys[with_keys].tolist() if with_keys else []
    return Appended(
        before,
        after,
        now_ms,
        queues,
        phys,
        batch.sizes,
        batch.tags_codes,
        batch.queue_offsets,
        index_keys,
        index_phys,
        batch.head["born_timestamp_ms"],
        batch.id_text,
    )
