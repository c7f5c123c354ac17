"""Every broker config key, described: ``rmq broker config --defaults`` and the README table.

:data:`DESCRIPTIONS` holds one line per key of ``[broker]`` (:class:`BrokerConfig`) and
``[store]`` (:class:`StoreConfig`); a test checks that every dataclass field has one and
that the README's table lists every key, so a new setting cannot go undocumented.

    >>> print(defaults_toml().splitlines()[0])
    # rmq broker config: every key with its default. Pass a file with --config.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from broker_core.auth.config import AuthConfig, TlsConfig
from broker_core.config import BrokerConfig, StoreConfig, value_kind

SECTIONS: Final[dict[str, type]] = {"broker": BrokerConfig, "store": StoreConfig}

DESCRIPTIONS: Final[dict[str, dict[str, str]]] = {
    "broker": {
        "broker_name": "name in routes and message ids' broker part (1..255 chars)",
        "endpoint": "HOST:PORT for an embedded Broker; `rmq broker start` advertises "
        "--advertise, else its listen address",
        "auto_create_topics": "a send to an unknown topic creates it (with default_queue_nums)",
        "auto_create_groups": "a consumer's first request creates its group with defaults",
        "default_queue_nums": "queues of an auto-created topic (1..1024)",
        "client_expiry_ms": "a client silent this long is dropped and its queues rebalanced",
        "offsets_persist_interval_ms": "how often committed consumer offsets are written",
        "transaction_check_timeout_ms": "age of an unresolved half message before a check-back",
        "transaction_max_checks": "check-backs before an unresolved half is rolled back",
        "transaction_check_interval_ms": "how often half messages are scanned for check-backs",
        "timer_precision_ms": "granularity of delivery times of timer (delayed) messages",
        "pop_revive_interval_ms": "how often unacked POP messages are checked for redelivery",
        "queue_lock_expiry_ms": "an orderly consumer's queue lock lapses after this",
        "max_pull_batch": "most messages one (decoded) pull returns",
        "max_raw_pull_batch": "most messages one bulk (raw) pull returns",
        "max_long_polling_ms": "longest a pull or receive waits for new messages",
        "dedup_window_ms": "a send repeating a message id stored this recently is answered "
        "with the original result, not stored again (0 = off)",
        "dedup_max_ids": "most message ids the dedup window holds (16 B each in batches of "
        "one client's rising ids, ≈120 B each otherwise; 0 = off)",
        "trace_topic_enable": "create RMQ_SYS_TRACE_TOPIC, where the 4.x clients' message "
        "traces are stored (RocketMQ's traceTopicEnable)",
        "trace_broker": "the broker's own trace records (stored, delivered, acked, retried, "
        "DLQ, transactions, timers): off, all, or the ratio of message ids traced (drawn by "
        "id bucket: an id without its last two characters); changes live (`rmq broker config "
        "set trace_broker all`)",
        "trace_topics": "comma-separated topics the broker traces (empty: every topic)",
        "trace_groups": "comma-separated consumer groups the broker traces (empty: every group)",
        "trace_flush_interval_ms": "how often buffered broker trace records are written",
        "grpc_extensions": "serve our gRPC services beside apache.rocketmq.v2 (rmq.admin.v1, "
        "rmq.bulk.v1); false = a standard RocketMQ 5 endpoint (--no-extensions)",
        "broker_id": "0 = the group's master, > 0 = a slave (--broker-id)",
        "ha_listen": "master: HOST:PORT its slaves replicate from; empty = no replication "
        "(--ha-listen)",
        "ha_master": "slave: its master's HA HOST:PORT (--ha-master)",
        "replication": "master: 'sync' acknowledges a send once the in-sync slaves have it, "
        "'async' at once (--replication)",
        "sync_replication_timeout_ms": "a sync-replicated send fails with "
        "ReplicationTimeoutError (retriable) after this",
        "ha_catch_up_window_ms": "a slave not caught up for this long leaves the in-sync set",
        "min_in_sync_replicas": "replicas (master included) a sync send needs in the in-sync set",
        "ha_heartbeat_interval_ms": "how often a slave reports its offset when idle",
        "ha_metadata_interval_ms": "how often a slave copies its master's config tables",
    },
    "store": {
        "store_dir": "directory of the commitlog, consume queues, index and config files "
        "(--store-dir)",
        "segment_size_bytes": "size of one commitlog segment file (4 KiB..2 GiB, holds the "
        "largest message)",
        "consume_queue_units_per_file": "20-byte entries per consume queue file",
        "index_slot_count": "hash slots per index file (message keys and ids)",
        "index_max_entries": "entries per index file before a new one starts",
        "flush_mode": "'sync': a send is acknowledged once on disk; 'async': flushed every "
        "flush_interval_ms (--flush)",
        "flush_interval_ms": "async flush period",
        "sync_flush_timeout_ms": "a sync send fails with FlushTimeoutError after this",
        "derived_flush_interval_ms": "how often consume queues, index and checkpoint are flushed",
        "max_body_bytes": "largest message body accepted",
        "max_properties_bytes": "largest encoded properties of one message",
        "file_reserved_hours": "retention: commitlog segments older than this are deleted",
        "disk_max_used_ratio": "above this disk use, retention deletes the oldest segments early",
        "disk_full_ratio": "above this disk use, sends are refused (BusyError, retriable)",
        "access_message_in_memory_max_ratio": (
            "share of physical memory from the log's end within which a message counts as "
            "in memory; a new group whose queue's first message is in memory starts there"
        ),
        "cleanup_interval_ms": "how often retention runs",
        "max_dispatch_lag_bytes": "sends are refused as busy while indexing lags this far",
        "max_flush_lag_bytes": "sends are refused as busy while flushing lags this far",
        "store_host": "host recorded as each message's store host (from --advertise/--listen)",
        "store_port": "port recorded as each message's store host (from --advertise/--listen)",
    },
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def defaults() -> dict[str, dict[str, Any]]:
    """{section: {key: default}} in declaration order."""
    return {
        section: {f.name: getattr(cls(), f.name) for f in dataclasses.fields(cls)}
        for section, cls in SECTIONS.items()
    }


def as_toml(values: dict[str, dict[str, Any]], header: str) -> str:
    """``values`` as a TOML document, each key preceded by its description and type."""
    lines = [f"# {header}"]
    for section, keys in values.items():
        lines += ["", f"[{section}]"]
        for key, value in keys.items():
            kind = value_kind(SECTIONS[section], key)
            lines += [f"# {DESCRIPTIONS[section][key]} ({kind})", f"{key} = {_toml_value(value)}"]
    return "\n".join(lines) + "\n"


# [auth] and [tls] (broker_core/auth/config.py): [auth] with its defaults; a user and [tls]
# need values of the operator's own (a secret, certificate files), so they are commented out.
SECURITY_DEFAULTS: Final[str] = """
[auth]
# sign and authorize every request; needs a super user in [[auth.users]] (bool)
enabled = false
# how far a request's x-mq-date-time may be off (int, >= 1000)
max_clock_skew_ms = 900000
# also accept stamps off by a time-zone offset (the official Python client's) (bool)
accept_local_time = true
# Users written into the user table at every start (secret_key: 6 or more characters):
# [[auth.users]]
# access_key = "admin"
# secret_key = "change-me-please"
# superuser = true

# [tls] serves TLS only, gRPC and remoting; uncomment with both files (PEM):
# [tls]
# cert_file = "server.pem"
# key_file = "server.key"
# client_ca_file = "ca.pem"       # optional: verify client certificates against this CA
# require_client_cert = false     # with client_ca_file: refuse clients without one
"""


def defaults_toml() -> str:
    """Every key with its default, as a commented TOML file a user can start from."""
    return (
        as_toml(
            defaults(), "rmq broker config: every key with its default. Pass a file with --config."
        )
        + SECURITY_DEFAULTS
    )


def security_toml(auth: AuthConfig, tls: TlsConfig | None) -> str:
    """The effective ``[auth]`` and ``[tls]`` of a file (users by access key; no secrets)."""
    lines = [
        "",
        "[auth]",
        f"enabled = {_toml_value(auth.enabled)}",
        f"max_clock_skew_ms = {auth.max_clock_skew_ms}",
        f"accept_local_time = {_toml_value(auth.accept_local_time)}",
    ]
    for user in auth.users:
        lines += ["", "[[auth.users]]", f"access_key = {_toml_value(user.access_key)}"]
        lines += ["# secret_key: set, not shown", f"superuser = {_toml_value(user.superuser)}"]
    if tls is not None:
        lines += ["", "[tls]", f"cert_file = {_toml_value(tls.cert_file)}"]
        lines += [f"key_file = {_toml_value(tls.key_file)}"]
        if tls.client_ca_file:
            lines.append(f"client_ca_file = {_toml_value(tls.client_ca_file)}")
        lines.append(f"require_client_cert = {_toml_value(tls.require_client_cert)}")
    return "\n".join(lines) + "\n"


def markdown_table() -> str:
    """The README's table: section, key, type, default, meaning."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for section, keys in defaults().items():
        for key, value in keys.items():
            kind = value_kind(SECTIONS[section], key)
            rows.append(
                f"| `[{section}] {key}` | {kind} | `{_toml_value(value)}` | "
                f"{DESCRIPTIONS[section][key]} |"
            )
    return "\n".join(rows)
