"""RocketMQ 4.x request signatures on the remoting port (``AclClientRPCHook``).

A 4.x client with session credentials adds to every request's ``extFields``::

    AccessKey      the user's access key
    SecurityToken  optional (STS); signed like any other field
    Signature      Base64(HmacSHA1(secretKey, content))

where ``content`` is the UTF-8 concatenation of the *values* of all ``extFields`` except
``Signature``, in key order (Java's ``TreeMap``: by UTF-16 code unit, which for the ASCII
keys of the protocol is Python's ``sorted``), followed by the body bytes
(``AclUtils.combineRequestContent``). Clients up to 4.9.3 left ``_UNIQUE_KEY_QUERY`` out
of the content, so the broker also accepts a signature made without that one field. The
C++ client signs the same way, with one more field (``OnsChannel``) that it also sends.

There is no timestamp in a 4.x signature: a captured request can be replayed; use TLS.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Final

from broker_core.errors import UnauthorizedError

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"  # unsigned by clients up to 4.9.3
MAX_ACCESS_KEY_CHARS: Final = 256


def content(fields: Mapping[str, str], body: bytes, *, skip: frozenset[str] = frozenset()) -> bytes:
    """What is signed: the values of ``fields`` but ``Signature`` (and ``skip``) in key
    order, then ``body``."""
    values = "".join(v for k, v in sorted(fields.items()) if k != SIGNATURE and k not in skip)
    return values.encode("utf-8") + body


def signature(secret_key: str, data: bytes) -> str:
    """Base64 of HmacSHA1(secret_key, data), as ``AclSigner.calSignature``."""
    digest = hmac.new(secret_key.encode("utf-8"), data, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signed_fields(
    fields: Mapping[str, str],
    body: bytes,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """``fields`` plus ``AccessKey`` (``SecurityToken``) and their ``Signature``: what
    our remoting client sends for a request with this body."""
    signed = dict(fields)
    signed[ACCESS_KEY] = access_key
    if security_token:
        signed[SECURITY_TOKEN] = security_token
    signed[SIGNATURE] = signature(secret_key, content(signed, body))
    return signed


def verify(fields: Mapping[str, str], body: bytes, secret_of: Callable[[str], str | None]) -> str:
    """The access key of a correctly signed request; UnauthorizedError naming what is
    wrong otherwise (no signature, unknown key, wrong secret or altered request)."""
    access_key, given = fields.get(ACCESS_KEY), fields.get(SIGNATURE)
    if not access_key or not given:
        raise UnauthorizedError(
            "authentication is on and the request is not signed (no AccessKey/Signature "
            "ext fields); give the client session credentials"
        )
    if len(access_key) > MAX_ACCESS_KEY_CHARS:
        raise UnauthorizedError(f"access key of {len(access_key)} characters is too long")
    secret = secret_of(access_key)
    if secret is None:
        raise UnauthorizedError(f"unknown access key {access_key[:64]!r}")
    candidates = [content(fields, body)]
    if UNIQUE_KEY_QUERY in fields:
        candidates.append(content(fields, body, skip=frozenset({UNIQUE_KEY_QUERY})))
    given_bytes = given.encode("utf-8", "replace")  # compare_digest takes ASCII str only
    if not any(hmac.compare_digest(signature(secret, c).encode(), given_bytes) for c in candidates):
        raise UnauthorizedError(
            f"signature mismatch for access key {access_key!r}: wrong secret key "
            "or a request altered after signing"
        )
    return access_key
