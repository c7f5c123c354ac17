"""Consumer group configurations (RocketMQ's subscription groups), kept durable.

A :class:`GroupConfig` says how a group consumes: its retry policy, where a new group
starts reading, whether it is FIFO, broadcasting or clustering, whether consumption is
enabled, and which rebalance strategy shares queues among its consumers.

Durability: :class:`GroupManager` keeps every config in memory and rewrites
``config/subscriptionGroup.json`` with :func:`write_json_atomic` on every change; memory
is only updated once the write succeeded. On open it loads the file, falling back to the
``.bak`` copy when the main one is torn or fails its checksum (the reason is kept in
``load_problem``). If a file exists but neither copy loads, opening raises
CorruptionError rather than silently forgetting every group.

Threads: every method of :class:`GroupManager` may be called from any thread; one lock
guards the table and the file write.

Example::

    >>> import tempfile, pathlib
    >>> groups = GroupManager(pathlib.Path(tempfile.mkdtemp()) / "subscriptionGroup.json")
    >>> groups.get_or_create("GID_orders").rebalance_strategy
    'averagely'
    >>> GroupConfig.from_dict({"name": "GID_b", "broadcast": True}).broadcast
    True
"""

from __future__ import annotations

import builtins
import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from broker_core.broker.rebalance import STRATEGY_NAMES, AllocateStrategy, strategy_by_name
from broker_core.broker.retry import RetryPolicy
from broker_core.errors import (
    ConfigError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidGroupError,
)
from broker_core.message import MAX_GROUP_NAME_CHARS, validate_group_name
from broker_core.store.atomic_file import read_json_table, write_json_atomic

CONSUME_FROM: Final = ("last_offset", "first_offset", "timestamp")
DEFAULT_STRATEGY: Final = "averagely"
# "by_config" allocates from per-client queue lists (RocketMQ configures it in each
# client); a group setting cannot give them: client ids change with every start.
GROUP_STRATEGIES: Final = tuple(n for n in STRATEGY_NAMES if n != "by_config")
BROADCAST_MARK: Final = "%BC%"  # joins a broadcasting group and one client's digest
_MEMBER_DIGEST_BYTES: Final = 8
_MEMBER_SUFFIX_CHARS: Final = len(BROADCAST_MARK) + 2 * _MEMBER_DIGEST_BYTES


def broadcast_member(group: str, client_id: str) -> str:
    """The name one client's own POP progress in broadcasting ``group`` is kept under.

    >>> broadcast_member("GID_b", "host@1@x").startswith("GID_b%BC%")
    True
    """
    digest = hashlib.blake2b(client_id.encode(), digest_size=_MEMBER_DIGEST_BYTES).hexdigest()
    return f"{group}{BROADCAST_MARK}{digest}"


def base_group(name: str) -> str:
    """The group a broadcast member name belongs to; any other name is returned as is.

    >>> base_group(broadcast_member("GID_b", "c1")), base_group("GID_a")
    ('GID_b', 'GID_a')
    """
    return name.split(BROADCAST_MARK, 1)[0]


def _check_bool(group: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"group {group}: {name} must be true or false, got {value!r}")


@dataclass(frozen=True)
class GroupConfig:
    """One consumer group's settings; validated on construction.

    ``consume_timestamp_ms`` is where a new group starts when ``consume_from_where`` is
    ``"timestamp"`` (ignored otherwise). ``broadcast=False`` means clustering: each queue
    goes to one consumer of the group; ``True`` gives every live client every message,
    with its own progress (POP state per client, see :func:`broadcast_member`).
    ``auto_created`` marks a group made on first use rather than configured: POP
    consumers of such a group start at the first offset (as RocketMQ's POP does while a
    queue still holds its first message); a configured group starts where it says.
    """

    name: str
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    consume_from_where: str = "last_offset"
    consume_timestamp_ms: int = 0
    fifo: bool = False
    broadcast: bool = False
    consume_enable: bool = True
    rebalance_strategy: str = DEFAULT_STRATEGY
    auto_created: bool = False

    def __post_init__(self) -> None:
        """Raise InvalidGroupError for a bad name, ConfigError for any other bad field."""
        if not isinstance(self.name, str):
            raise InvalidGroupError(f"group name must be a string, got {self.name!r}")
        validate_group_name(self.name)
        if BROADCAST_MARK in self.name:
            raise InvalidGroupError(f"group name {self.name!r} must not contain {BROADCAST_MARK}")
        if not isinstance(self.retry_policy, RetryPolicy):
            raise ConfigError(f"group {self.name}: retry_policy must be a RetryPolicy")
        if self.consume_from_where not in CONSUME_FROM:
            raise ConfigError(
                f"group {self.name}: consume_from_where must be one of "
                f"{', '.join(CONSUME_FROM)}, got {self.consume_from_where!r}"
            )
        ts = self.consume_timestamp_ms
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise ConfigError(f"group {self.name}: consume_timestamp_ms must be an int >= 0")
        for flag in ("fifo", "broadcast", "consume_enable", "auto_created"):
            _check_bool(self.name, flag, getattr(self, flag))
        if self.broadcast and len(self.name) + _MEMBER_SUFFIX_CHARS > MAX_GROUP_NAME_CHARS:
            raise ConfigError(
                f"group {self.name}: a broadcasting group's name may have at most "
                f"{MAX_GROUP_NAME_CHARS - _MEMBER_SUFFIX_CHARS} characters"
            )
        if self.rebalance_strategy == "by_config":
            raise ConfigError(
                f"group {self.name}: rebalance_strategy 'by_config' is not offered: it needs "
                f"a queue list per client id, which a group setting cannot give; valid: "
                f"{', '.join(GROUP_STRATEGIES)}"
            )
        if self.rebalance_strategy not in GROUP_STRATEGIES:
            raise ConfigError(
                f"group {self.name}: unknown rebalance_strategy {self.rebalance_strategy!r}; "
                f"valid: {', '.join(GROUP_STRATEGIES)}"
            )

    def strategy(self) -> AllocateStrategy:
        """A fresh instance of the group's rebalance strategy (default arguments)."""
        return strategy_by_name(self.rebalance_strategy)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form that :meth:`from_dict` reads back."""
        return {
            "name": self.name,
            "retry_policy": self.retry_policy.to_dict(),
            "consume_from_where": self.consume_from_where,
            "consume_timestamp_ms": self.consume_timestamp_ms,
            "fifo": self.fifo,
            "broadcast": self.broadcast,
            "consume_enable": self.consume_enable,
            "rebalance_strategy": self.rebalance_strategy,
            "auto_created": self.auto_created,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupConfig:
        """Rebuild from :meth:`to_dict` output; absent keys take the defaults.

        Raises ConfigError for a non-mapping, a missing name, unknown keys or bad values
        (InvalidGroupError, also an InvalidArgumentError, for a bad name).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"group config must be an object, got {data!r}")
        unknown = sorted(set(data) - _GROUP_KEYS)
        if unknown:
            allowed = sorted(_GROUP_KEYS)
            raise ConfigError(f"group config: unknown keys {unknown}; allowed {allowed}")
        if "name" not in data:
            raise ConfigError("group config is missing 'name'")
        values = dict(data)
        if "retry_policy" in values:
            values["retry_policy"] = RetryPolicy.from_dict(values["retry_policy"])
        return cls(**values)


_GROUP_KEYS: Final = frozenset(GroupConfig("x").to_dict())


class GroupManager:
    """Every consumer group's config, persisted to one JSON file on each change."""

    def __init__(self, path: Path, *, auto_create: bool = True) -> None:
        """Load ``path`` (or its ``.bak``); CorruptionError if a file exists but neither loads."""
        self._path = path
        self.auto_create = auto_create
        self._lock = threading.Lock()
        self._groups: dict[str, GroupConfig] = {}
        self.load_problem = ""
        self._load()

    def _load(self) -> None:
        loaded = read_json_table(self._path, "group configs")
        self.load_problem = loaded.problem if loaded.source == "backup" else ""
        if loaded.data is None:
            return
        try:
            configs = [GroupConfig.from_dict(self._upgrade(item)) for item in loaded.data["groups"]]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{self._path} holds malformed group configs: {exc!r}") from exc
        self._groups = {config.name: config for config in configs}

    def _upgrade(self, item: Any) -> Any:
        """A stored group of an older version, made valid: 'by_config' (accepted once, but it
        assigned nothing) becomes the default strategy, and ``load_problem`` says so."""
        if isinstance(item, Mapping) and item.get("rebalance_strategy") == "by_config":
            self.load_problem = (f"{self.load_problem}; " if self.load_problem else "") + (
                f"group {item.get('name')!r}: rebalance_strategy 'by_config' is not offered; "
                f"it now uses {DEFAULT_STRATEGY!r}"
            )
            return {**item, "rebalance_strategy": DEFAULT_STRATEGY}
        return item

    def reload(self) -> None:
        """Re-read the file (a slave adopting the copy of its master's table)."""
        with self._lock:
            self._load()

    def _write_locked(self, table: dict[str, GroupConfig]) -> None:
        """Persist ``table`` and then adopt it; the caller holds ``_lock``."""
        write_json_atomic(self._path, {"groups": [table[n].to_dict() for n in sorted(table)]})
        self._groups = table

    def create_or_update(self, config: GroupConfig) -> GroupConfig:
        """Store ``config`` (replacing one of the same name) durably; idempotent."""
        if not isinstance(config, GroupConfig):
            raise InvalidArgumentError(f"expected a GroupConfig, got {config!r}")
        with self._lock:
            if self._groups.get(config.name) != config:
                self._write_locked({**self._groups, config.name: config})
        return config

    def get(self, name: str) -> GroupConfig | None:
        """The config of ``name``, or None."""
        with self._lock:
            return self._groups.get(name)

    def require(self, name: str) -> GroupConfig:
        """The config of ``name``; GroupNotFoundError if there is none."""
        config = self.get(name)
        if config is None:
            raise GroupNotFoundError(f"consumer group {name!r} does not exist")
        return config

    def get_or_create(self, name: str) -> GroupConfig:
        """The config of ``name``, created with defaults when missing and auto-create is on.

        Raises InvalidGroupError for a bad name and GroupNotFoundError when the group is
        missing and auto-create is off.
        """
        validate_group_name(name)
        with self._lock:
            config = self._groups.get(name)
            if config is not None:
                return config
            if not self.auto_create:
                raise GroupNotFoundError(
                    f"consumer group {name!r} does not exist and auto-create is off"
                )
            config = GroupConfig(name, auto_created=True)
            self._write_locked({**self._groups, name: config})
            return config

    def delete(self, name: str) -> bool:
        """Forget ``name`` durably; True if it existed."""
        with self._lock:
            if name not in self._groups:
                return False
            self._write_locked({n: c for n, c in self._groups.items() if n != name})
        return True

    def list(self) -> builtins.list[GroupConfig]:
        """Every config, sorted by name."""
        with self._lock:
            return [self._groups[name] for name in sorted(self._groups)]
