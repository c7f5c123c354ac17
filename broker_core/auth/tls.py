"""TLS for the broker's gRPC port (``[tls]`` in the broker's TOML, see auth/config.py)."""

from __future__ import annotations

from pathlib import Path

import grpc

from broker_core.auth.config import TlsConfig
from broker_core.errors import ConfigError


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"[tls] cannot read {what} {path}: {exc}") from exc
    if b"-----BEGIN" not in data:
        raise ConfigError(f"[tls] {what} {path} is not PEM")
    return data


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """Server credentials from the PEM files; ConfigError naming an unreadable one."""
    pair = (_read(tls.key_file, "key_file"), _read(tls.cert_file, "cert_file"))
    roots = _read(tls.client_ca_file, "client_ca_file") if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [pair], root_certificates=roots, require_client_auth=tls.require_client_cert
    )


def channel_credentials(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> grpc.ChannelCredentials:
    """Client credentials: trust ``ca_file`` (else the system roots, or gRPC's
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``), present a client certificate when given."""
    roots = _read(ca_file, "CA file") if ca_file else None
    key = _read(key_file, "client key") if key_file else None
    cert = _read(cert_file, "client certificate") if cert_file else None
    return grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=key, certificate_chain=cert
    )
