"""Where an appended message went: the store's answer to a put."""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.message import offset_message_id


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
