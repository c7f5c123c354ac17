"""Where an appended message went: the store's answer to a put."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_core.message import PROPERTY_UNIQ_KEY, Message, offset_message_id

if TYPE_CHECKING:
    from broker_core.store.columns import ColumnBatch


@dataclass(slots=True)
class PutResult:
    """Where an appended message went."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp_ms: int
    uniq_key: str | None
    store_host: tuple[str, int]

    @property
    def offset_message_id(self) -> str:
        return offset_message_id(self.store_host, self.physical_offset)

    @property
    def message_id(self) -> str:
        """The client-visible id: the producer's UNIQ_KEY, else the offset id."""
        return self.uniq_key or self.offset_message_id


def results_of(
    messages: Sequence[Message], batch: ColumnBatch, stored_ms: int, host: tuple[str, int]
) -> list[PutResult]:
    """One result per message of ``batch`` (encoded from ``messages``), once appended."""
    if len(messages) == 1:  # the common single put: no column lists to build
        msg = messages[0]
        return [
            PutResult(
                msg.topic,
                msg.queue_id,
                batch.queue_offsets.item(0),
                batch.physical_offsets.item(0),
                batch.sizes.item(0),
                stored_ms,
                msg.properties.get(PROPERTY_UNIQ_KEY),
                host,
            )
        ]
    return [
        PutResult(
            msg.topic,
            msg.queue_id,
            queue_offset,
            physical_offset,
            size,
            stored_ms,
            msg.properties.get(PROPERTY_UNIQ_KEY),
            host,
        )
        for msg, queue_offset, physical_offset, size in zip(
            messages,
            batch.queue_offsets.tolist(),
            batch.physical_offsets.tolist(),
            batch.sizes.tolist(),
            strict=True,
        )
    ]
