"""The throwaway CA for TLS tests (``broker_core/auth/throwaway_ca.py``), a ``[tls]`` table."""

from __future__ import annotations

from broker_core.auth.throwaway_ca import Pki, make_pki

__all__ = ["Pki", "make_pki", "tls_toml"]


def tls_toml(pki: Pki, *, client_ca: bool = False) -> str:
    """A ``[tls]`` table serving ``pki``'s server certificate (verifying clients: optional)."""
    text = f'\n[tls]\ncert_file = "{pki.server_cert}"\nkey_file = "{pki.server_key}"\n'
    if client_ca:
        text += f'client_ca_file = "{pki.ca}"\nrequire_client_cert = true\n'
    return text
