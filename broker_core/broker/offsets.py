"""Consumer offsets: where each group is in each queue, committed by clients, kept durable.

Offsets live in memory and are persisted to ``config/consumerOffset.json`` (atomically,
with a ``.bak``) whenever ``persist()`` runs — the broker calls it periodically and on
shutdown; ``commit(..., durable=True)`` persists at once. An offset is the next message
the group will consume, so committing ``n`` acknowledges everything below ``n``. A file
read from its ``.bak`` keeps the reason in ``load_problem`` (the broker logs it); a file
that exists but loads from neither copy raises CorruptionError instead of starting empty,
which would silently send every group back to its consume-from-where.

Threads: every method may be called from any thread (one lock).
"""

from __future__ import annotations

import threading
from pathlib import Path

from broker_core.errors import ConfigError, InvalidOffsetError
from broker_core.message import validate_group_name
from broker_core.store.atomic_file import read_json_table, write_json_atomic

Key = tuple[str, str, int]  # (group, topic, queue id)


class ConsumerOffsetManager:
    """Committed offsets of every (group, topic, queue)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()  # keeps writes in order
        self._offsets: dict[Key, int] = {}
        self._dirty = False
        self.load_problem = ""
        self._load()

    def _load(self) -> None:
        loaded = read_json_table(self._path, "consumer offsets")  # never forget them silently
        self.load_problem = loaded.problem if loaded.source == "backup" else ""
        if loaded.data is None:
            return
        try:
            for group, topics in loaded.data.items():
                for topic, queues in topics.items():
                    for qid, offset in queues.items():
                        self._offsets[(group, topic, int(qid))] = int(offset)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ConfigError(f"{self._path} holds malformed offsets: {exc}") from exc

    def commit(
        self, group: str, topic: str, queue_id: int, offset: int, *, durable: bool = False
    ) -> None:
        """Record that ``group`` has consumed everything below ``offset`` in the queue."""
        validate_group_name(group)
        if offset < 0 or queue_id < 0:
            raise InvalidOffsetError(f"offset {offset} / queue {queue_id} must be ≥ 0")
        with self._lock:
            self._offsets[(group, topic, queue_id)] = offset
            self._dirty = True
        if durable:
            self.persist()

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed in this queue."""
        with self._lock:
            return self._offsets.get((group, topic, queue_id))

    def queues_of(self, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """{(topic, queue id): offset} of one group, optionally one topic."""
        with self._lock:
            return {
                (t, q): o
                for (g, t, q), o in self._offsets.items()
                if g == group and (topic is None or t == topic)
            }

    def groups(self) -> list[str]:
        with self._lock:
            return sorted({g for g, _, _ in self._offsets})

    def groups_of_topic(self, topic: str) -> list[str]:
        with self._lock:
            return sorted({g for g, t, _ in self._offsets if t == topic})

    def remove_group(self, group: str) -> None:
        with self._lock:
            self._offsets = {k: v for k, v in self._offsets.items() if k[0] != group}
            self._dirty = True

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            self._offsets = {k: v for k, v in self._offsets.items() if k[1] != topic}
            self._dirty = True

    def adopt(self, doc: dict[str, dict[str, dict[str, int]]]) -> None:
        """Take a master's offsets (its ``consumerOffset.json`` document): they replace
        ours queue by queue; queues only we know keep their offsets."""
        with self._lock:
            for group, topics in doc.items():
                for topic, queues in topics.items():
                    for qid, offset in queues.items():
                        key = (group, topic, int(qid))
                        if self._offsets.get(key) != int(offset):
                            self._offsets[key] = int(offset)
                            self._dirty = True

    def persist(self) -> None:
        """Write all offsets durably if anything changed since the last write."""
        with self._persist_lock:
            with self._lock:
                if not self._dirty:
                    return
                doc: dict[str, dict[str, dict[str, int]]] = {}
                for (group, topic, qid), offset in self._offsets.items():
                    doc.setdefault(group, {}).setdefault(topic, {})[str(qid)] = offset
                self._dirty = False
            write_json_atomic(self._path, doc)
