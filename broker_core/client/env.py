"""Client settings from the environment (the CLI's): credentials and TLS.

``RMQ_ACCESS_KEY`` / ``RMQ_SECRET_KEY`` sign every request; ``RMQ_TLS=true`` connects
with TLS (trusting the system roots or gRPC's ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``);
``RMQ_CA_FILE=ca.pem`` trusts that CA (and implies TLS); ``RMQ_CLIENT_CERT`` and
``RMQ_CLIENT_KEY`` present a client certificate to a broker that verifies them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from broker_core.errors import InvalidArgumentError


def client_settings(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``RocketMQClient`` from ``env`` (default: os.environ)."""
    env = os.environ if env is None else env
    access_key, secret_key = env.get("RMQ_ACCESS_KEY", ""), env.get("RMQ_SECRET_KEY", "")
    if bool(access_key) != bool(secret_key):
        raise InvalidArgumentError("set both RMQ_ACCESS_KEY and RMQ_SECRET_KEY, or neither")
    tls = env.get("RMQ_TLS", "").strip().lower()
    if tls not in ("", "0", "1", "true", "false", "yes", "no"):
        raise InvalidArgumentError(f"RMQ_TLS must be true or false, got {tls!r}")
    return {
        "access_key": access_key or None,
        "secret_key": secret_key or None,
        "tls": tls in ("1", "true", "yes"),
        "ca_file": env.get("RMQ_CA_FILE") or None,
        "cert_file": env.get("RMQ_CLIENT_CERT") or None,
        "key_file": env.get("RMQ_CLIENT_KEY") or None,
    }
