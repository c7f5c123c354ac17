"""Which messages the broker traces: a share of message ids, some topics, some groups (pure).

An event is traced when its message id falls in the sampled share (the same ids for every
event of a message, so a sampled message's timeline is whole), its topic is listed (or no
topic is), and its consumer group is listed (or no group is, or the event has none: a
store has no group). Retry and DLQ topics count as their group's.

>>> s = TraceSelection.parse("all", "orders", "")
>>> s.wants("ID1", "orders", ""), s.wants("ID1", "audit", "")
(True, False)
>>> TraceSelection.parse("0.0", "", "").enabled
False
>>> half = TraceSelection.parse("0.5", "", "")
>>> for ids in ([f"ID{i:04d}" for i in range(100)], ["ID7", "", "ÄÖ", "ID123"]):
...     assert half.sampled_rows(ids) == [r for r, i in enumerate(ids) if i and half.sampled(i)]
>>> len(half.sampled_rows([f"ID{i:04d}" for i in range(100)])) not in (0, 100)
True
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from broker_core.config import trace_ratio
from broker_core.store.index_layout import key_hashes

_SPACE = 1 << 32


def _names(csv: str) -> frozenset[str]:
    return frozenset(n.strip() for n in csv.split(",") if n.strip())


@dataclass(frozen=True, slots=True)
class TraceSelection:
    """What ``trace_broker`` / ``trace_topics`` / ``trace_groups`` select."""

    ratio: float
    topics: frozenset[str]
    groups: frozenset[str]

    @classmethod
    def parse(cls, broker: str, topics: str, groups: str) -> TraceSelection:
        return cls(trace_ratio(broker), _names(topics), _names(groups))

    @property
    def enabled(self) -> bool:
        return self.ratio > 0

    def topic_wanted(self, topic: str) -> bool:
        return not self.topics or topic in self.topics

    def group_wanted(self, group: str) -> bool:
        return not group or not self.groups or group in self.groups

    def sampled(self, message_id: str) -> bool:
        """The same answer for every event of one id (a CRC of it against the ratio)."""
        if self.ratio >= 1:
            return True
        return zlib.crc32(message_id.encode()) < self.ratio * _SPACE

    def sampled_rows(self, message_ids: list[str]) -> list[int]:
        """The rows of ``message_ids`` that :meth:`sampled` keeps ("" never), in order,
        their CRCs taken as one array."""
        if self.ratio >= 1:
            return [row for row, i in enumerate(message_ids) if i]
        crcs = key_hashes(message_ids)  # zlib.crc32 of each id's UTF-8, as sampled() takes
        rows = np.flatnonzero(crcs < self.ratio * _SPACE).tolist()
        return [row for row in rows if message_ids[row]]  # crc32(b"") is 0: always under

    def wants(self, message_id: str, topic: str, group: str) -> bool:
        return self.topic_wanted(topic) and self.group_wanted(group) and self.sampled(message_id)
