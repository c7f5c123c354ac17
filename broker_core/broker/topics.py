"""Topic configurations: queue counts, permissions, message types, kept durable.

A :class:`TopicConfig` says how many queues producers may write (``write_queue_nums``)
and consumers may read (``read_queue_nums``), what the topic permits (:class:`Perm`) and
which RocketMQ 5 message type it accepts. The two counts may differ: shrinking the write
count first lets consumers drain the old queues before the read count follows, so nothing
is lost. (A read count below the write count leaves the upper queues unread until it grows
again; the messages stay in the store.) Attributes are free-form strings, as RocketMQ's;
one is read here: ``dedup`` (``true``, the default, or ``false``: sends to the topic are
not deduplicated, ``broker/dedup.py``).

Durability: :class:`TopicManager` keeps every config in memory and rewrites
``config/topics.json`` with :func:`write_json_atomic` on every change; memory is only
updated once the write succeeded, so no reader sees a topic the disk does not hold. On
open it loads the file, falling back to ``topics.json.bak`` when the main copy is torn or
fails its checksum (the reason is kept in ``load_problem``). If a file exists but neither
copy loads, opening raises CorruptionError rather than silently starting with no topics.
The store knows nothing of topics; deleting a topic here does not delete its messages.

Threads: every method of :class:`TopicManager` may be called from any thread; one lock
guards the table and the file write, so writes reach the disk in the order they happened.

Example::

    >>> import tempfile, pathlib
    >>> topics = TopicManager(pathlib.Path(tempfile.mkdtemp()) / "config" / "topics.json")
    >>> topics.for_send("orders").write_queue_nums
    8
    >>> topics.write_queue_for("orders", None, counter=10)
    2
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from broker_core.broker.order import queue_for_message_group
from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.retry import (
    DELAY_LEVELS_MS,
    dlq_topic,
    is_dlq_topic,
    is_retry_topic,
    retry_topic,
)
from broker_core.broker.system_topics import (
    REVIVE_TOPIC,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
)
from broker_core.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidTopicError,
    PermissionDeniedError,
    TopicNotFoundError,
)
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.perm import Perm
from broker_core.store.atomic_file import read_json_table, write_json_atomic

MESSAGE_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE", "MIXED")
MIXED: Final = "MIXED"
MAX_QUEUE_NUMS: Final = 1024
DEFAULT_QUEUE_NUMS: Final = 8


def _check_queue_nums(name: str, value: object) -> int:
    """Return ``value`` if it is an int (not bool) in 1..1024, else raise ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if not 1 <= value <= MAX_QUEUE_NUMS:
        raise ConfigError(f"{name} must be in 1..{MAX_QUEUE_NUMS}, got {value}")
    return value


DEDUP_ATTRIBUTE: Final = "dedup"  # "false": the topic's sends are not deduplicated


@dataclass(frozen=True)
class TopicConfig:
    """One topic's settings; validated on construction (name, counts, perm, type)."""

    name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = Perm.READ_WRITE
    message_type: str = MIXED
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        """Raise InvalidTopicError for a bad name, ConfigError for any other bad field."""
        if not isinstance(self.name, str):
            raise InvalidTopicError(f"topic name must be a string, got {self.name!r}")
        validate_topic_name(self.name)
        _check_queue_nums("read_queue_nums", self.read_queue_nums)
        _check_queue_nums("write_queue_nums", self.write_queue_nums)
        if isinstance(self.perm, bool) or self.perm not in Perm.VALID:
            raise ConfigError(
                f"topic {self.name}: perm must be 2 (write), 4 (read) or 6 (read+write), "
                f"got {self.perm!r}"
            )
        if self.message_type not in MESSAGE_TYPES:
            raise ConfigError(
                f"topic {self.name}: message_type must be one of {', '.join(MESSAGE_TYPES)}, "
                f"got {self.message_type!r}"
            )
        if not isinstance(self.attributes, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.attributes.items()
        ):
            raise ConfigError(f"topic {self.name}: attributes must map str to str")
        dedup = self.attributes.get(DEDUP_ATTRIBUTE, "true")
        if dedup not in ("true", "false"):
            raise ConfigError(
                f"topic {self.name}: attribute {DEDUP_ATTRIBUTE} must be true or false, "
                f"got {dedup!r}"
            )
        object.__setattr__(self, "attributes", dict(self.attributes))

    @property
    def dedup(self) -> bool:
        """Whether sends to the topic are deduplicated (attribute ``dedup``, default true)."""
        return self.attributes.get(DEDUP_ATTRIBUTE) != "false"

    def accepts(self, message_type: str) -> bool:
        """True if a message of ``message_type`` may be sent here (MIXED takes anything but
        LITE: lite topics live only under a LITE parent topic)."""
        if message_type == "LITE":
            return self.message_type == "LITE"
        return self.message_type in (MIXED, message_type)

    def read_queues(self, broker_name: str) -> list[MessageQueue]:
        """The queues consumers read, in queue id order."""
        return [MessageQueue(self.name, broker_name, q) for q in range(self.read_queue_nums)]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form that :meth:`from_dict` reads back."""
        return {
            "name": self.name,
            "read_queue_nums": self.read_queue_nums,
            "write_queue_nums": self.write_queue_nums,
            "perm": self.perm,
            "message_type": self.message_type,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TopicConfig:
        """Rebuild from :meth:`to_dict` output; absent keys take defaults, unknown raise."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"topic config must be an object, got {data!r}")
        unknown = sorted(set(data) - _TOPIC_KEYS)
        if unknown:
            allowed = sorted(_TOPIC_KEYS)
            raise ConfigError(f"topic config: unknown keys {unknown}; allowed {allowed}")
        if "name" not in data:
            raise ConfigError("topic config is missing 'name'")
        return cls(**data)


_TOPIC_KEYS: Final = frozenset(TopicConfig("x").to_dict())


def select_write_queue(write_queue_nums: int, message_group: str | None, counter: int) -> int:
    """Pick the queue a message is written to (pure).

    A message group always maps to the same queue (:func:`queue_for_message_group`);
    otherwise messages go round robin: ``counter % write_queue_nums``. Raises
    InvalidArgumentError for a counter that is not an int >= 0 or a bad queue count.
    """
    if isinstance(counter, bool) or not isinstance(counter, int) or counter < 0:
        raise InvalidArgumentError(f"counter must be an int >= 0, got {counter!r}")
    if message_group is not None:
        return queue_for_message_group(message_group, write_queue_nums)
    if isinstance(write_queue_nums, bool) or not isinstance(write_queue_nums, int):
        raise InvalidArgumentError(f"write_queue_nums must be an int, got {write_queue_nums!r}")
    if write_queue_nums < 1:
        raise InvalidArgumentError(f"write_queue_nums must be >= 1, got {write_queue_nums}")
    return counter % write_queue_nums


def auto_creatable(name: str) -> bool:
    """True if a first send may create ``name``: not a system, retry or DLQ topic (pure)."""
    return not (is_system_topic(name) or is_retry_topic(name) or is_dlq_topic(name))


def system_topic_configs() -> list[TopicConfig]:
    """The topics the broker needs for delay, timers, transactions and POP (pure)."""
    one_queue = (TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, REVIVE_TOPIC)
    levels = len(DELAY_LEVELS_MS)
    return [TopicConfig(SCHEDULE_TOPIC, levels, levels)] + [TopicConfig(t, 1, 1) for t in one_queue]


class TopicManager:
    """Every topic's config, persisted to one JSON file on each change."""

    def __init__(
        self, path: Path, *, auto_create: bool = True, default_queue_nums: int = DEFAULT_QUEUE_NUMS
    ) -> None:
        """Load ``path`` (or its ``.bak``); CorruptionError if a file exists but neither loads."""
        self._path = path
        self.auto_create = auto_create
        self.default_queue_nums = _check_queue_nums("default_queue_nums", default_queue_nums)
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self.load_problem = ""
        self._listeners: builtins.list[Callable[[], None]] = []
        self._load()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs (under the table's lock: keep it short, e.g. set an event)
        after every durable change of the table: create, update, delete."""
        self._listeners.append(listener)

    def _load(self) -> None:
        loaded = read_json_table(self._path, "topic configs")
        self.load_problem = loaded.problem if loaded.source == "backup" else ""
        if loaded.data is None:
            return
        try:
            configs = [TopicConfig.from_dict(item) for item in loaded.data["topics"]]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{self._path} holds malformed topic configs: {exc!r}") from exc
        self._topics = {config.name: config for config in configs}

    def reload(self) -> None:
        """Re-read the file (a slave adopting the copy of its master's table)."""
        with self._lock:
            self._load()

    def _write_locked(self, table: dict[str, TopicConfig]) -> None:
        """Persist ``table`` and then adopt it, so memory never runs ahead of the disk.

        The caller holds ``_lock``.
        """
        write_json_atomic(self._path, {"topics": [table[n].to_dict() for n in sorted(table)]})
        self._topics = table
        for listener in self._listeners:
            listener()

    def _put_locked(self, configs: builtins.list[TopicConfig]) -> None:
        """Store ``configs``, persisting once if any changed; the caller holds ``_lock``."""
        changed = {c.name: c for c in configs if self._topics.get(c.name) != c}
        if changed:
            self._write_locked({**self._topics, **changed})

    def create_or_update(self, config: TopicConfig) -> TopicConfig:
        """Store ``config`` (replacing one of the same name) durably; idempotent."""
        if not isinstance(config, TopicConfig):
            raise InvalidArgumentError(f"expected a TopicConfig, got {config!r}")
        with self._lock:
            self._put_locked([config])
        return config

    def get(self, name: str) -> TopicConfig | None:
        """The config of ``name``, or None."""
        with self._lock:
            return self._topics.get(name)

    def dedup(self, name: str) -> bool:
        """Whether sends to ``name`` may be deduplicated (:attr:`TopicConfig.dedup`; a
        topic not created yet: yes)."""
        config = self.get(name)
        return config is None or config.dedup

    def require(self, name: str) -> TopicConfig:
        """The config of ``name``; TopicNotFoundError if there is none."""
        config = self.get(name)
        if config is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        return config

    def for_send(self, name: str) -> TopicConfig:
        """The config a producer may write to, auto-creating ordinary topics when enabled.

        Raises InvalidTopicError for a bad name, TopicNotFoundError when the topic is
        missing and may not be auto-created, PermissionDeniedError when it is not writeable.
        """
        validate_topic_name(name)
        with self._lock:
            config = self._topics.get(name)
            if config is None:
                if not (self.auto_create and auto_creatable(name)):
                    raise TopicNotFoundError(
                        f"topic {name!r} does not exist"
                        + ("" if self.auto_create else " and auto-create is off")
                    )
                config = TopicConfig(name, self.default_queue_nums, self.default_queue_nums)
                self._put_locked([config])
        if not Perm.writeable(config.perm):
            raise PermissionDeniedError(
                f"topic {name!r} is not writeable (perm {Perm.describe(config.perm)})"
            )
        return config

    def for_read(self, name: str) -> TopicConfig:
        """The config a consumer may read; TopicNotFoundError / PermissionDeniedError."""
        config = self.require(name)
        if not Perm.readable(config.perm):
            raise PermissionDeniedError(
                f"topic {name!r} is not readable (perm {Perm.describe(config.perm)})"
            )
        return config

    def delete(self, name: str) -> bool:
        """Forget ``name`` durably; True if it existed. System topics cannot be deleted."""
        if is_system_topic(name):
            raise InvalidTopicError(f"{name!r} is a system topic and cannot be deleted")
        with self._lock:
            if name not in self._topics:
                return False
            self._write_locked({n: c for n, c in self._topics.items() if n != name})
        return True

    def cover_queues(self, held: Mapping[str, int]) -> builtins.list[str]:
        """Make every topic readable up to the queues a store holds (``held``: topic ->
        highest queue id + 1); returns the names created or widened, persisted once.

        A promoted slave calls it: its copy of the master's table may lack a topic made
        (or widened) since the last copy, while its log already holds that topic's
        messages. A missing ordinary topic gets what auto-create gives, widened to cover
        the held queues; a missing retry/DLQ/system topic exactly the held queues; a known
        topic with fewer read queues gets more read queues (its write queues are the
        master's choice and stay).
        """
        with self._lock:
            configs = [c for name, n in held.items() if (c := self._covering(name, n))]
            self._put_locked(configs)
        return [c.name for c in configs]

    def _covering(self, name: str, held: int) -> TopicConfig | None:
        held = min(held, MAX_QUEUE_NUMS)
        config = self._topics.get(name)
        if config is None:
            nums = max(held, self.default_queue_nums) if auto_creatable(name) else held
            return TopicConfig(name, nums, nums)
        if config.read_queue_nums >= held:
            return None
        return replace(config, read_queue_nums=held)

    def list(self) -> builtins.list[TopicConfig]:
        """Every config, sorted by name."""
        with self._lock:
            return [self._topics[name] for name in sorted(self._topics)]

    def ensure_system_topics(self) -> builtins.list[TopicConfig]:
        """Create the missing system topics (existing ones are left as they are)."""
        with self._lock:
            missing = [c for c in system_topic_configs() if c.name not in self._topics]
            self._put_locked(missing)
            return [self._topics[c.name] for c in system_topic_configs()]

    def ensure_retry_topic(self, group: str) -> TopicConfig:
        """The retry topic of ``group`` (``%RETRY%group``), created with one queue if missing."""
        return self._ensure(retry_topic(validate_group_name(group)))

    def ensure_dlq_topic(self, group: str) -> TopicConfig:
        """The dead-letter topic of ``group`` (``%DLQ%group``), made with one queue if missing."""
        return self._ensure(dlq_topic(validate_group_name(group)))

    def _ensure(self, name: str) -> TopicConfig:
        with self._lock:
            if name not in self._topics:
                self._put_locked([TopicConfig(name, 1, 1)])
            return self._topics[name]

    def write_queue_for(self, name: str, message_group: str | None, counter: int) -> int:
        """The queue of topic ``name`` to write to; see :func:`select_write_queue`."""
        return select_write_queue(self.require(name).write_queue_nums, message_group, counter)
