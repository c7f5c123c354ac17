"""``[auth]`` and ``[tls]`` of the broker's TOML file.

::

    [auth]
    enabled = true                 # off by default: every request is accepted unsigned
    max_clock_skew_ms = 900000     # how far a request's x-mq-date-time may be off
    accept_local_time = true       # also accept stamps off by a time-zone offset
                                   # (the official Python client's local-time stamps;
                                   # see broker_core/auth/signature.py)
    [[auth.users]]                 # written into the user table at every start
    access_key = "admin"
    secret_key = "..."
    superuser = true

    [tls]
    cert_file = "server.pem"       # PEM certificate chain of the broker
    key_file = "server.key"        # its PEM private key
    client_ca_file = "ca.pem"      # optional: verify client certificates against this CA
    require_client_cert = false    # with client_ca_file: refuse clients without one
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core.auth.acl import User, validate_access_key, validate_secret_key
from broker_core.errors import ConfigError, InvalidArgumentError

_AUTH_KEYS = frozenset({"enabled", "max_clock_skew_ms", "accept_local_time", "users"})
_USER_KEYS = frozenset({"access_key", "secret_key", "superuser"})
_TLS_KEYS = frozenset({"cert_file", "key_file", "client_ca_file", "require_client_cert"})


@dataclass(frozen=True, slots=True)
class AuthConfig:
    enabled: bool = False
    max_clock_skew_ms: int = 900_000
    accept_local_time: bool = True
    users: tuple[User, ...] = ()


@dataclass(frozen=True, slots=True)
class TlsConfig:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    require_client_cert: bool = False


def _unknown(table: str, values: dict[str, Any], known: frozenset[str]) -> None:
    extra = sorted(set(values) - known)
    if extra:
        raise ConfigError(f"unknown config key(s) in [{table}]: {', '.join(extra)}")


def _typed(table: str, values: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = values.get(key, default)
    if value is not None and (
        not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    ):
        raise ConfigError(f"[{table}] {key} must be a {kind.__name__}, got {value!r}")
    return value


def auth_config(doc: dict[str, Any]) -> AuthConfig:
    table = doc.get("auth", {})
    _unknown("auth", table, _AUTH_KEYS)
    users = []
    for entry in table.get("users", []):
        if not isinstance(entry, dict):
            raise ConfigError("[[auth.users]] entries must be tables")
        _unknown("auth.users", entry, _USER_KEYS)
        try:
            users.append(
                User(
                    validate_access_key(str(entry.get("access_key", ""))),
                    validate_secret_key(str(entry.get("secret_key", ""))),
                    bool(_typed("auth.users", entry, "superuser", bool, False)),
                )
            )
        except InvalidArgumentError as exc:
            raise ConfigError(f"[[auth.users]]: {exc}") from None
    config = AuthConfig(
        bool(_typed("auth", table, "enabled", bool, False)),
        _typed("auth", table, "max_clock_skew_ms", int, 900_000),
        bool(_typed("auth", table, "accept_local_time", bool, True)),
        tuple(users),
    )
    if config.max_clock_skew_ms < 1_000:
        raise ConfigError("[auth] max_clock_skew_ms must be ≥ 1000")
    if config.enabled and not any(u.superuser for u in users):
        raise ConfigError(
            "[auth] enabled = true needs a super user in [[auth.users]] "
            "(superuser = true), or nobody could administer the broker"
        )
    return config


def tls_config(doc: dict[str, Any]) -> TlsConfig | None:
    table = doc.get("tls")
    if table is None:
        return None
    _unknown("tls", table, _TLS_KEYS)
    cert = _typed("tls", table, "cert_file", str, None)
    key = _typed("tls", table, "key_file", str, None)
    if not cert or not key:
        raise ConfigError("[tls] needs cert_file and key_file")
    config = TlsConfig(
        cert,
        key,
        _typed("tls", table, "client_ca_file", str, None),
        bool(_typed("tls", table, "require_client_cert", bool, False)),
    )
    if config.require_client_cert and not config.client_ca_file:
        raise ConfigError("[tls] require_client_cert needs client_ca_file")
    return config


def load_security(path: str | Path | None) -> tuple[AuthConfig, TlsConfig | None]:
    """``[auth]`` and ``[tls]`` of the broker's TOML file (defaults when None)."""
    if path is None:
        return AuthConfig(), None
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    return auth_config(doc), tls_config(doc)
