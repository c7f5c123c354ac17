"""TLS for the remoting ports (NameServer, the broker's 4.x listener) with Python's ``ssl``.

The server side takes the broker's ``[tls]`` table (:class:`TlsConfig`: certificate, key,
optionally a CA to verify client certificates against). The client side trusts a CA file
(else the system roots) and may present a client certificate. ``client_context_from_env``
is what :class:`NameServerClient` uses when not given a context: ``RMQ_CA_FILE`` (implies
TLS) or ``RMQ_TLS=true``, with ``RMQ_CLIENT_CERT``/``RMQ_CLIENT_KEY``; so a broker started
with those registers over TLS and the CLI reads routes over TLS, with no extra flags.
The connections themselves run over ``tls_stream.TlsStream`` (renegotiation off).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from broker_core.auth.config import TlsConfig
from broker_core.errors import ConfigError

HANDSHAKE_TIMEOUT_S = 10.0  # a connection that has not finished its handshake by then is dropped


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server context for ``tls``; ConfigError naming an unreadable or bad file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION  # TlsStream cannot renegotiate
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.client_ca_file:
            context.load_verify_locations(tls.client_ca_file)
            context.verify_mode = (
                ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"[tls] cannot load {tls.cert_file}/{tls.key_file}/{tls.client_ca_file}: {exc}"
        ) from None
    return context


def client_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client context trusting ``ca_file`` (else the system roots), checking the host
    name, presenting ``cert_file``/``key_file`` when given; ConfigError on a bad file."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
        context.options |= ssl.OP_NO_RENEGOTIATION  # TlsStream cannot renegotiate
        if cert_file:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"TLS: cannot load {ca_file}/{cert_file}: {exc}") from None
    return context


def client_context_from_env(env: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """The client context ``RMQ_CA_FILE``/``RMQ_TLS``/``RMQ_CLIENT_CERT``/``RMQ_CLIENT_KEY``
    ask for, or None (plain TCP) when neither ``RMQ_CA_FILE`` nor ``RMQ_TLS`` is set."""
    env = os.environ if env is None else env
    ca_file = env.get("RMQ_CA_FILE") or None
    if ca_file is None and env.get("RMQ_TLS", "").strip().lower() not in ("1", "true", "yes"):
        return None
    return client_context(
        ca_file, env.get("RMQ_CLIENT_CERT") or None, env.get("RMQ_CLIENT_KEY") or None
    )
