"""Options ``accessKey`` / ``secretKey`` (signed requests) and ``tls`` / ``caFile`` of the
rocketmq source and sink.

The keys travel with the read options and every partition (executors open their own
clients), but are never printed: :class:`Access` shows only the access key, and option
errors never quote the secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from broker_core.errors import ConfigError
from connector.option_parse import boolean

OPTIONS: Final = ("accessKey", "secretKey", "tls", "caFile")


@dataclass(frozen=True, slots=True)
class Access:
    """How to reach the brokers: credentials and TLS (picklable)."""

    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``RocketMQClient``."""
        return {
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "tls": self.tls,
            "ca_file": self.ca_file,
        }


NO_ACCESS: Final = Access()


def parse_access(given: Mapping[str, str]) -> Access:
    """The four options (canonical names) → Access; ConfigError (never quoting a secret)."""
    access_key = given.get("accessKey", "").strip() or None
    secret_key = given.get("secretKey") or None
    if access_key and not secret_key:
        raise ConfigError("option 'accessKey' needs option 'secretKey' too")
    if secret_key and not access_key:
        raise ConfigError("option 'secretKey' needs option 'accessKey' too")
    tls = boolean("tls", given.get("tls", "false"))
    ca_file = given.get("caFile", "").strip() or None
    if ca_file is not None and not os.path.isfile(ca_file):
        raise ConfigError(f"option 'caFile': no such file {ca_file!r} (a PEM CA certificate)")
    return Access(access_key, secret_key, tls or ca_file is not None, ca_file)
