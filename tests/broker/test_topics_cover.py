"""``TopicManager.cover_queues``: a promoted slave derives the topic configs it lacks
from the queues its log holds (``ha/group.py``, ``Replication.promote``)."""

from __future__ import annotations

from pathlib import Path

from broker_core.broker.topics import TopicConfig, TopicManager


def test_missing_and_narrow_topics_are_made_to_cover_held_queues(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    topics = TopicManager(path, default_queue_nums=4)
    topics.create_or_update(TopicConfig("Narrow", 2, 1))
    topics.create_or_update(TopicConfig("Wide", 8, 8))
    held = {"Unknown": 8, "Small": 1, "%RETRY%g": 1, "Narrow": 6, "Wide": 3}
    assert sorted(topics.cover_queues(held)) == ["%RETRY%g", "Narrow", "Small", "Unknown"]
    got = {c.name: (c.read_queue_nums, c.write_queue_nums) for c in topics.list()}
    assert got["Unknown"] == (8, 8)  # every held queue readable and writable
    assert got["Small"] == (4, 4)  # what auto-create would have given
    assert got["%RETRY%g"] == (1, 1)  # no auto-create for retry topics: exactly what is held
    assert got["Narrow"] == (6, 1)  # read queues widened; write queues the master's choice
    assert got["Wide"] == (8, 8)  # never narrowed
    assert {c.name for c in TopicManager(path).list()} == set(got)  # persisted
    assert topics.cover_queues(held) == []  # idempotent
