"""Which messages the broker traces: a share of message ids, some topics, some groups (pure).

An event is traced when its message id falls in the sampled share (the same ids for every
event of a message, so a sampled message's timeline is whole), its topic is listed (or no
topic is), and its consumer group is listed (or no group is, or the event has none: a
store has no group). Retry and DLQ topics count as their group's.

The share is drawn by the id's *bucket* (``trace_runs.bucket_key``: the id without its
last two characters), so an append is sampled by its few buckets, not id by id; one
client's ids end in a sequence, so a sampled message comes with the up to 255 others of
its client's sequence that share its bucket.

>>> s = TraceSelection.parse("all", "orders", "")
>>> s.wants("ID1", "orders", ""), s.wants("ID1", "audit", "")
(True, False)
>>> TraceSelection.parse("0.0", "", "").enabled
False
>>> half = TraceSelection.parse("0.5", "", "")
>>> for ids in ([f"ID{i:04d}" for i in range(10_000)], ["ID7", "", "ÄÖ", "ID123"]):
...     assert half.sampled_rows(ids) == [r for r, i in enumerate(ids) if i and half.sampled(i)]
>>> len(half.sampled_rows([f"ID{i:04d}" for i in range(10_000)])) not in (0, 10_000)
True
>>> half.sampled("ID0001") == half.sampled("ID0099")  # one bucket
True
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from operator import itemgetter

from broker_core.config import trace_ratio

_SPACE = 1 << 32
_BUCKET_OF = itemgetter(slice(None, -2))


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
        """The same answer for every event of one id, and for every id of its bucket."""
        return self.ratio >= 1 or self.bucket_sampled(message_id[:-2])

    def bucket_sampled(self, bucket: str) -> bool:
        """Whether the ids of ``bucket`` (an id without its last two characters) are
        traced: a CRC of the bucket against the ratio."""
        return self.ratio >= 1 or zlib.crc32(bucket.encode()) < self.ratio * _SPACE

    def sampled_rows(self, message_ids: list[str]) -> list[int]:
        """The rows of ``message_ids`` that :meth:`sampled` keeps ("" never), in order,
        each bucket's CRC taken once."""
        if self.ratio >= 1:
            return [row for row, i in enumerate(message_ids) if i]
        keep = {b: self.bucket_sampled(b) for b in set(map(_BUCKET_OF, message_ids))}
        return [row for row, i in enumerate(message_ids) if i and keep[i[:-2]]]

    def wants(self, message_id: str, topic: str, group: str) -> bool:
        return self.topic_wanted(topic) and self.group_wanted(group) and self.sampled(message_id)
