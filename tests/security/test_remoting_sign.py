"""4.x remoting signatures (``AclClientRPCHook``'s scheme), table-driven, no network."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from broker_core.auth.remoting_sign import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    content,
    signed_fields,
    verify,
)
from broker_core.errors import UnauthorizedError

SECRETS = {"alice": "alice-secret"}
FIELDS = {"topic": "orders", "queueId": "1", "consumerGroup": "GID_a"}


def test_content_is_the_values_in_key_order_then_the_body() -> None:
    fields = {"b": "2", "a": "1", "C": "0", SIGNATURE: "ignored"}
    assert content(fields, b"body") == b"012body"  # "C" < "a" < "b", as Java's TreeMap


def test_the_signature_is_base64_hmac_sha1_of_the_content() -> None:
    signed = signed_fields(FIELDS, b"xyz", "alice", "alice-secret")
    # keys in order: AccessKey, consumerGroup, queueId, topic; then the body
    expected_content = b"alice" + b"GID_a" + b"1" + b"orders" + b"xyz"
    digest = hmac.new(b"alice-secret", expected_content, hashlib.sha1).digest()
    assert signed[SIGNATURE] == base64.b64encode(digest).decode()
    assert signed[ACCESS_KEY] == "alice" and SECURITY_TOKEN not in signed
    assert verify(signed, b"xyz", SECRETS.get) == "alice"


def test_a_security_token_is_sent_and_signed() -> None:
    signed = signed_fields(FIELDS, b"", "alice", "alice-secret", security_token="sts-1")
    assert signed[SECURITY_TOKEN] == "sts-1"
    assert verify(signed, b"", SECRETS.get) == "alice"
    with pytest.raises(UnauthorizedError, match="signature mismatch"):
        verify({**signed, SECURITY_TOKEN: "sts-2"}, b"", SECRETS.get)


def test_a_signature_without_the_unique_key_query_field_is_accepted() -> None:
    """Clients up to 4.9.3 left ``_UNIQUE_KEY_QUERY`` out of what they signed."""
    old = signed_fields(FIELDS, b"", "alice", "alice-secret")
    assert verify({**old, UNIQUE_KEY_QUERY: "true"}, b"", SECRETS.get) == "alice"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f, b: ({k: v for k, v in f.items() if k != SIGNATURE}, b), "not signed"),
        (lambda f, b: ({k: v for k, v in f.items() if k != ACCESS_KEY}, b), "not signed"),
        (lambda f, b: ({**f, ACCESS_KEY: "mallory"}, b), "unknown access key 'mallory'"),
        (lambda f, b: ({**f, ACCESS_KEY: "x" * 300}, b), "too long"),
        (lambda f, b: ({**f, "queueId": "2"}, b), "signature mismatch"),  # altered field
        (lambda f, b: ({**f, "extra": "1"}, b), "signature mismatch"),  # added field
        (lambda f, b: (f, b + b"!"), "signature mismatch"),  # altered body
        (lambda f, b: ({**f, SIGNATURE: "ünïcode"}, b), "signature mismatch"),
        (lambda f, b: ({**f, SIGNATURE: ""}, b), "not signed"),
    ],
)
def test_forged_or_altered_requests_never_authenticate(change, reason) -> None:
    signed = signed_fields(FIELDS, b"body", "alice", "alice-secret")
    fields, body = change(signed, b"body")
    with pytest.raises(UnauthorizedError, match=reason):
        verify(fields, body, SECRETS.get)


def test_the_wrong_secret_is_refused() -> None:
    signed = signed_fields(FIELDS, b"", "alice", "not-her-secret")
    with pytest.raises(UnauthorizedError, match="signature mismatch for access key 'alice'"):
        verify(signed, b"", SECRETS.get)
