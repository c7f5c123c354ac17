"""Configuration dataclasses, loaded from TOML and validated in one place.

Every field name carries its unit. Unknown keys and out-of-range values raise
:class:`~broker_core.errors.ConfigError` naming the key, so a typo in a config file
is an error at start-up rather than a silently ignored setting.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from broker_core.auth.config import auth_config, tls_config
from broker_core.errors import ConfigError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


class FlushMode(StrEnum):
    ASYNC = "async"
    SYNC = "sync"


class Role(StrEnum):
    """A broker's place in its group (``broker_core.ha``): the config's ``broker_id`` is the
    input (0 = master), this is what the code tests. A slave's store refuses client writes."""

    MASTER = "master"
    SLAVE = "slave"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Settings of the message store (``broker_core.store``)."""

    store_dir: str = ".rocketmq/store"
    segment_size_bytes: int = 1 * GIB
    consume_queue_units_per_file: int = 300_000
    index_slot_count: int = 500_000
    index_max_entries: int = 2_000_000
    flush_mode: FlushMode = FlushMode.ASYNC
    flush_interval_ms: int = 500
    sync_flush_timeout_ms: int = 5_000
    derived_flush_interval_ms: int = 1_000
    max_body_bytes: int = 4 * MIB
    max_properties_bytes: int = 32 * KIB
    file_reserved_hours: float = 72.0
    disk_max_used_ratio: float = 0.85  # above this, retention deletes the oldest segments
    disk_full_ratio: float = 0.95  # above this, appends are refused with BusyError
    # a message within this share of physical memory from the log's end counts as "in
    # memory" (RocketMQ's accessMessageInMemoryMaxRatio, 40%): where new groups start
    access_message_in_memory_max_ratio: float = 0.40
    cleanup_interval_ms: int = 10_000
    max_dispatch_lag_bytes: int = 256 * MIB
    max_flush_lag_bytes: int = 512 * MIB
    store_host: str = "127.0.0.1"
    store_port: int = 8081

    def __post_init__(self) -> None:
        if isinstance(self.flush_mode, str) and not isinstance(self.flush_mode, FlushMode):
            try:
                object.__setattr__(self, "flush_mode", FlushMode(self.flush_mode))
            except ValueError:
                raise ConfigError(
                    f"flush_mode must be 'sync' or 'async', got {self.flush_mode!r}"
                ) from None
        _check_types(StoreConfig, _values(self), "")
        _require_at_least(
            self,
            1,
            "flush_interval_ms",
            "sync_flush_timeout_ms",
            "derived_flush_interval_ms",
            "cleanup_interval_ms",
            "max_body_bytes",
            "max_dispatch_lag_bytes",
            "max_flush_lag_bytes",
        )
        _require_at_least(self, 0, "max_properties_bytes")
        _require(self.segment_size_bytes >= 4 * KIB, "segment_size_bytes must be ≥ 4096")
        _require(
            self.segment_size_bytes >= self.max_body_bytes + self.max_properties_bytes + 4 * KIB,
            "segment_size_bytes must hold the largest message "
            "(max_body_bytes + max_properties_bytes + 4 KiB)",
        )
        _require(self.segment_size_bytes < 2**31, "segment_size_bytes must be < 2 GiB")
        _require(self.consume_queue_units_per_file >= 1, "consume_queue_units_per_file must be ≥ 1")
        _require(self.index_slot_count >= 1, "index_slot_count must be ≥ 1")
        _require(self.index_max_entries >= 1, "index_max_entries must be ≥ 1")
        _require(self.file_reserved_hours > 0, "file_reserved_hours must be > 0")
        _require(0 < self.disk_max_used_ratio <= 1, "disk_max_used_ratio must be in (0, 1]")
        _require(0 < self.disk_full_ratio <= 1, "disk_full_ratio must be in (0, 1]")
        _require(
            0 <= self.access_message_in_memory_max_ratio <= 1,
            "access_message_in_memory_max_ratio must be in [0, 1]",
        )

    @property
    def commitlog_dir(self) -> Path:
        return Path(self.store_dir) / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return Path(self.store_dir) / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return Path(self.store_dir) / "index"

    @property
    def config_dir(self) -> Path:
        return Path(self.store_dir) / "config"


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _require_at_least(config: object, minimum: int, *names: str) -> None:
    """ConfigError naming the first of ``names`` whose value is below ``minimum``."""
    for name in names:
        value = getattr(config, name)
        _require(value >= minimum, f"{name} must be ≥ {minimum}, got {value!r}")


def _values(config: object) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}  # type: ignore[arg-type]


T = TypeVar("T")


# A field's annotation (a string: ``from __future__ import annotations``) → the Python
# types a TOML value of it may have, and how to say so. bool is never an int here.
_VALUE_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "str": ((str,), "a string"),
    "bool": ((bool,), "true or false"),
    "FlushMode": ((str,), "'sync' or 'async'"),
}


def value_kind(cls: type, key: str) -> str:
    """How ``cls``'s field ``key`` is written in TOML (``an integer``, ``a string``, ...)."""
    annotation = {f.name: f.type for f in dataclasses.fields(cls)}[key]
    return _VALUE_KINDS[str(annotation)][1]


def _check_types(cls: type, values: dict[str, Any], where: str) -> None:
    """ConfigError naming the key and the expected type for a value of the wrong type."""
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        kinds, what = _VALUE_KINDS[str(f.type)]
        value = values[f.name]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise ConfigError(
                f"config key {f.name}{where} must be {what}, got {value!r} ({type(value).__name__})"
            )


def from_mapping(cls: type[T], values: dict[str, Any], *, section: str = "") -> T:
    """Build dataclass ``cls`` from a dict, rejecting unknown keys and wrong types by name."""
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    where = f" in [{section}]" if section else ""
    if unknown:
        raise ConfigError(f"unknown config key(s){where}: {', '.join(unknown)}")
    _check_types(cls, values, where)
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"bad config{' in [' + section + ']' if section else ''}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Settings of the broker's policy layer (``broker_core.broker``)."""

    broker_name: str = "broker-a"
    endpoint: str = "127.0.0.1:8081"  # advertised to clients in routes
    auto_create_topics: bool = True
    auto_create_groups: bool = True
    default_queue_nums: int = 8
    client_expiry_ms: int = 120_000
    offsets_persist_interval_ms: int = 5_000
    transaction_check_timeout_ms: int = 6_000
    transaction_max_checks: int = 15
    transaction_check_interval_ms: int = 1_000
    timer_precision_ms: int = 1_000
    pop_revive_interval_ms: int = 1_000
    queue_lock_expiry_ms: int = 60_000
    max_pull_batch: int = 1_024
    max_raw_pull_batch: int = 65_536  # raw pulls also stop at their byte budget
    max_long_polling_ms: int = 30_000
    # Idempotent sends (``broker/dedup.py``): repeats of a message id stored this recently
    # are answered with the original result, not stored (0 = off).
    dedup_window_ms: int = 120_000
    dedup_max_ids: int = 1_000_000
    # Our services beside apache.rocketmq.v2 (admin, bulk); off = a plain RocketMQ 5 endpoint.
    grpc_extensions: bool = True
    # Message trace (``broker_core.broker.trace``): the trace topic, and the broker's records.
    trace_topic_enable: bool = False  # create RMQ_SYS_TRACE_TOPIC for the clients' traces
    trace_broker: str = "off"  # the broker's own records: "off", "all" or a ratio "0.1"
    trace_topics: str = ""  # comma-separated topics traced ("" = every topic)
    trace_groups: str = ""  # comma-separated consumer groups traced ("" = every group)
    trace_flush_interval_ms: int = 200  # how often buffered broker records are written
    # Broker groups and replication (``broker_core.ha``; docs/ARCHITECTURE.md).
    broker_id: int = 0  # 0 = the group's master, > 0 = a slave (``role``)
    ha_listen: str = ""  # master: HOST:PORT its slaves connect to ("" = no replication)
    ha_master: str = ""  # slave: the master's HA HOST:PORT
    replication: str = "async"  # master: "sync" acks a send once the in-sync slaves have it
    sync_replication_timeout_ms: int = 5_000
    ha_catch_up_window_ms: int = 15_000  # a slave not caught up this long leaves the in-sync set
    min_in_sync_replicas: int = 1  # replicas (master included) a sync send needs in the set
    ha_heartbeat_interval_ms: int = 1_000
    ha_metadata_interval_ms: int = 2_000  # slave: how often it copies the master's tables

    def __post_init__(self) -> None:
        _check_types(BrokerConfig, _values(self), "")
        _require(
            bool(self.broker_name) and len(self.broker_name) <= 255,
            "broker_name must be 1..255 chars",
        )
        _check_ha(self)
        _check_trace(self)
        host, _, port = self.endpoint.rpartition(":")
        _require(
            bool(host) and port.isdigit() and 0 < int(port) < 65536,
            f"endpoint must be host:port, got {self.endpoint!r}",
        )
        _require(1 <= self.default_queue_nums <= 1024, "default_queue_nums must be in 1..1024")
        _require(
            self.dedup_window_ms >= 0 and self.dedup_max_ids >= 0,
            "dedup_window_ms and dedup_max_ids must be ≥ 0 (0 = off)",
        )
        _require_at_least(
            self,
            1,
            "client_expiry_ms",
            "offsets_persist_interval_ms",
            "transaction_check_timeout_ms",
            "transaction_max_checks",
            "transaction_check_interval_ms",
            "timer_precision_ms",
            "pop_revive_interval_ms",
            "queue_lock_expiry_ms",
            "max_pull_batch",
            "max_raw_pull_batch",
            "max_long_polling_ms",
        )

    @property
    def role(self) -> Role:
        """The role ``broker_id`` gives (a controller may assign another at start)."""
        return Role.MASTER if self.broker_id == 0 else Role.SLAVE


def _check_ha(c: BrokerConfig) -> None:
    """Validate the broker-group fields (a slave needs its master's HA address)."""
    _require(c.broker_id >= 0, "broker_id must be ≥ 0 (0 = master)")
    _require(
        c.replication in ("sync", "async"),
        f"replication must be 'sync' or 'async', got {c.replication!r}",
    )
    for name in ("ha_listen", "ha_master"):
        value = getattr(c, name)
        host, _, port = value.rpartition(":")
        _require(
            not value or (bool(host) and port.isdigit() and int(port) < 65536),
            f"{name} must be HOST:PORT, got {value!r}",
        )
    _require(
        c.broker_id == 0 or bool(c.ha_master),
        f"broker {c.broker_name} id {c.broker_id} is a slave: it needs ha_master "
        "(--ha-master HOST:PORT)",
    )
    _require(c.broker_id > 0 or not c.ha_master, "ha_master is for slaves (broker_id > 0)")
    for name in (
        "sync_replication_timeout_ms",
        "ha_catch_up_window_ms",
        "min_in_sync_replicas",
        "ha_heartbeat_interval_ms",
        "ha_metadata_interval_ms",
    ):
        _require(getattr(c, name) >= 1, f"{name} must be ≥ 1")


def trace_ratio(value: str) -> float:
    """``trace_broker`` as the share of messages traced: off 0, all 1, else the ratio."""
    if value in ("off", "all"):
        return 0.0 if value == "off" else 1.0
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    _require(0 <= ratio <= 1, f"trace_broker must be 'off', 'all' or a ratio 0..1, got {value!r}")
    return ratio


def _check_trace(c: BrokerConfig) -> None:
    trace_ratio(c.trace_broker)
    _require(c.trace_flush_interval_ms >= 1, "trace_flush_interval_ms must be ≥ 1")


def load_config(
    path: str | Path | None, **store_overrides: Any
) -> tuple[BrokerConfig, StoreConfig]:
    """Read ``[broker]`` and ``[store]`` from a TOML file (None: defaults + overrides),
    validating the whole file: its ``[auth]`` and ``[tls]`` too (ConfigError names the key)."""
    doc: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    unknown = sorted(set(doc) - {"broker", "store", "auth", "tls"})  # auth, tls: auth/config.py
    if unknown:
        raise ConfigError(
            f"unknown config table(s): {', '.join(unknown)} (use [broker], [store], [auth], [tls])"
        )
    for table in ("broker", "store", "auth", "tls"):
        if not isinstance(doc.get(table, {}), dict):
            raise ConfigError(f"config: {table} must be a table ([{table}]), got {doc[table]!r}")
    # [auth] and [tls] are read where they are used (auth/config.py); checked here too, so
    # whatever reads a file (broker start, rmq broker config --config) refuses the same.
    auth_config(doc)
    tls_config(doc)
    store_values = dict(doc.get("store", {}))
    store_values.update(store_overrides)
    return (
        from_mapping(BrokerConfig, dict(doc.get("broker", {})), section="broker"),
        from_mapping(StoreConfig, store_values, section="store"),
    )
