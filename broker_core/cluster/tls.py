"""TLS for a throwaway local cluster (``rmq cluster up --tls``).

``enable_tls(directory)`` makes a throwaway CA under ``directory/tls`` (see
``auth/throwaway_ca.py``; needs the ``cryptography`` package) and returns what the
NameServer and brokers need to serve TLS with it: the NameServer's flags and the brokers'
``[tls]`` table. It also sets ``RMQ_CA_FILE`` in this process's environment, so that the
brokers it starts register with the NameServer over TLS and its own NameServer calls
(waiting for registration) use TLS too. Clients trust the CA through ``RMQ_CA_FILE`` (our
client, the CLI) or ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` (the official client).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from broker_core.errors import ConfigError


@dataclass(frozen=True)
class ClusterTls:
    ca_file: Path
    namesrv_args: list[str]  # --tls-cert/--tls-key for ``rmq namesrv start``
    broker_tls: dict[str, str]  # the brokers' ``[tls]`` table


def enable_tls(directory: Path) -> ClusterTls:
    """Make the CA and certificates; ConfigError when ``cryptography`` is not installed."""
    try:
        from broker_core.auth.throwaway_ca import make_pki
    except ImportError as exc:
        raise ConfigError(f"--tls needs the 'cryptography' package: {exc}") from None
    pki = make_pki(directory / "tls")
    os.environ["RMQ_CA_FILE"] = str(pki.ca)
    cert, key = str(pki.server_cert), str(pki.server_key)
    return ClusterTls(
        pki.ca, ["--tls-cert", cert, "--tls-key", key], {"cert_file": cert, "key_file": key}
    )
