"""The config tables a new master needs, copied from master to slave.

What is copied (all under ``store_dir/config``): topics (``topics.json``), consumer
groups (``subscriptionGroup.json``), consumer offsets (``consumerOffset.json``, which
also holds the POP revive and transaction-op progress), the delay-level progress
(``delayOffset.json``) and the users and ACL rules (``auth.json``, ``auth/store.py``).
The slave asks every ``ha_metadata_interval_ms`` over its own short HA connection
(``wire.METADATA_REQUEST``); the master answers with one JSON document ``{file name:
file content}`` read from its durable files (offsets are persisted first). The slave
writes the topic, group and delay files atomically and reloads them; offsets are adopted
queue by queue (queues only the slave knows keep theirs) and persisted by the slave's own
offset manager. The user table is written mode 0600 and re-read through the reloader
registered for it (``Replication.on_table_copied``), so a promoted slave authenticates and
authorizes exactly as its master did. It holds secret keys in clear (HMAC needs them),
so, like the messages themselves, it crosses the HA link unencrypted: the HA port
belongs on a private network.

Not copied: the timer wheel's own files (``timerwheel/``). Its messages are in the
replicated commitlog, but a promoted slave rebuilds the wheel by ingesting the timer
topic from the start, so timers that had already fired may fire again (at-least-once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from broker_core.auth.store import AUTH_FILE as AUTH
from broker_core.auth.store import write_private_json
from broker_core.errors import ReplicationProtocolError
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic

TOPICS, GROUPS, OFFSETS, DELAY = (
    "topics.json",
    "subscriptionGroup.json",
    "consumerOffset.json",
    "delayOffset.json",
)


class Reloadable(Protocol):
    """A table kept in a file that re-reads it (the broker's topic and group managers)."""

    def reload(self) -> None: ...


class TopicTable(Reloadable, Protocol):
    """The topic table: reloadable, and a promoted slave derives missing topics."""

    def cover_queues(self, held: Mapping[str, int]) -> list[str]: ...


class OffsetTable(Protocol):
    """The consumer offsets: written to their file, and adopted from a master's copy."""

    def persist(self) -> None: ...

    def adopt(self, doc: dict[str, dict[str, dict[str, int]]]) -> None: ...


@dataclass(frozen=True, slots=True)
class ConfigTables:
    """What replication needs of the broker's config tables: snapshot (master) and apply
    (slave). ``reloaders``: file name -> what re-reads it, for tables the broker does not
    own (the user/ACL table: the composition root registers it, ``server/assembly.py``)."""

    config_dir: Path
    topics: TopicTable
    groups: Reloadable
    offsets: OffsetTable
    reloaders: dict[str, Callable[[], None]] = field(default_factory=dict)

    def snapshot(self) -> bytes:
        """The master's tables as one JSON document (``{file name: content or null}``)."""
        self.offsets.persist()
        root = self.config_dir
        names = (TOPICS, GROUPS, OFFSETS, DELAY, AUTH)
        doc = {name: read_json_atomic(root / name).data for name in names}
        return json.dumps(doc, separators=(",", ":")).encode()

    def apply(self, body: bytes) -> None:
        """Adopt a master's tables on a slave; ReplicationProtocolError if it is no
        snapshot."""
        try:
            doc: dict[str, Any] = json.loads(body)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise ReplicationProtocolError(
                f"metadata from the master does not parse: {exc}"
            ) from exc
        root = self.config_dir
        if _write_if_changed(root / TOPICS, doc.get(TOPICS)):
            self.topics.reload()
        if _write_if_changed(root / GROUPS, doc.get(GROUPS)):
            self.groups.reload()
        _write_if_changed(root / DELAY, doc.get(DELAY))
        if _write_if_changed(root / AUTH, doc.get(AUTH), private=True):
            self.reloaders.get(AUTH, _nothing)()
        offsets = doc.get(OFFSETS)
        if isinstance(offsets, dict):
            self.offsets.adopt(offsets)
            self.offsets.persist()


def _write_if_changed(path: Path, content: Any, *, private: bool = False) -> bool:
    if not isinstance(content, dict) or read_json_atomic(path).data == content:
        return False
    (write_private_json if private else write_json_atomic)(path, content)
    return True


def _nothing() -> None:
    """No reloader: the file is read when the broker next starts."""
