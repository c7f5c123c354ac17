"""The MQv2-HMAC-SHA1 signature: same bytes as the official client, parsing, clock skew."""

from __future__ import annotations

import calendar
import time
from types import SimpleNamespace

import pytest
from rocketmq.v5.util.signature import Signature

from broker_core.auth.signature import (
    Verifier,
    authorization,
    parse_authorization,
    sign,
    signed_metadata,
    stamp_ms,
    utc_stamp,
)
from broker_core.errors import UnauthorizedError

NOW_S = calendar.timegm((2026, 5, 1, 12, 0, 0, 0, 0, 0))
SECRETS = {"ak": "sk-secret"}


def verifier(**kwargs) -> Verifier:
    return Verifier(SECRETS.get, clock_ms=lambda: NOW_S * 1000, **kwargs)


def headers(stamp: str, key: str = "ak", secret: str = "sk-secret") -> list[tuple[str, str]]:
    return [("x-mq-date-time", stamp), ("authorization", authorization(key, secret, stamp))]


def stamp_at(offset_s: float) -> str:
    return utc_stamp(NOW_S + offset_s)


def test_matches_the_official_client_byte_for_byte() -> None:
    config = SimpleNamespace(credentials=SimpleNamespace(ak="ak", sk="sk-secret"), namespace="")
    official = dict(Signature.metadata(config, "client-1"))
    stamp = official["x-mq-date-time"]
    assert sign("sk-secret", stamp) == Signature.sign("sk-secret", stamp)
    assert authorization("ak", "sk-secret", stamp) == official["authorization"]
    ours = dict(signed_metadata("ak", "sk-secret"))
    assert parse_authorization(ours["authorization"]).access_key == "ak"
    assert abs(stamp_ms(ours["x-mq-date-time"]) - time.time() * 1000) < 5_000


@pytest.mark.parametrize(
    ("offset_s", "accepted"),
    [
        (0, True),
        (-899, True),
        (899, True),
        (-901, True),
        (901, True),
        (9 * 3600, True),  # a Python client in UTC+9 (stamps local time with Z)
        (-8 * 3600, True),  # ... in UTC-8
        (14 * 3600 + 800, True),
        (-12 * 3600 - 800, True),
        (14 * 3600 + 1000, False),
        (-12 * 3600 - 1000, False),  # beyond every time zone
        (-2 * 86_400, False),  # a replayed header from two days ago
    ],
)
def test_local_time_stamps_widen_the_window_to_every_time_zone(offset_s, accepted) -> None:
    check = verifier(max_skew_ms=900_000, accept_local_time=True)
    if accepted:
        assert check.verify(headers(stamp_at(offset_s))) == "ak"
    else:
        with pytest.raises(UnauthorizedError, match="clock skew"):
            check.verify(headers(stamp_at(offset_s)))


@pytest.mark.parametrize(
    ("offset_s", "accepted"),
    [
        (0, True),
        (899, True),
        (-899, True),
        (901, False),
        (-901, False),
        (9 * 3600, False),
        (-3600, False),
    ],
)
def test_strict_utc_window_without_local_time(offset_s, accepted) -> None:
    check = verifier(max_skew_ms=900_000, accept_local_time=False)
    if accepted:
        assert check.verify(headers(stamp_at(offset_s))) == "ak"
    else:
        with pytest.raises(UnauthorizedError, match="clock skew"):
            check.verify(headers(stamp_at(offset_s)))


NOW = utc_stamp(NOW_S)
GOOD = authorization("ak", "sk-secret", NOW)
SIG = sign("sk-secret", NOW)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([], "not signed"),
        ([("x-mq-date-time", NOW)], "not signed"),
        ([("authorization", GOOD)], "without the x-mq-date-time"),
        (
            [
                ("x-mq-date-time", NOW),
                ("authorization", GOOD.replace("MQv2-HMAC-SHA1", "AWS4-HMAC-SHA256")),
            ],
            "unsupported signature algorithm",
        ),
        (
            [
                ("x-mq-date-time", NOW),
                ("authorization", f"MQv2-HMAC-SHA1 Credential=ak, Signature={SIG}"),
            ],
            "malformed",
        ),
        (
            [
                ("x-mq-date-time", NOW),
                (
                    "authorization",
                    "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=",
                ),
            ],
            "malformed",
        ),
        (
            [
                ("x-mq-date-time", NOW),
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-request-id, Signature={SIG}",
                ),
            ],
            "SignedHeaders",
        ),
        ([("x-mq-date-time", "2026-05-01 12:00:00"), ("authorization", GOOD)], "yyyyMMddTHHmmssZ"),
        ([("x-mq-date-time", "20261301T120000Z"), ("authorization", GOOD)], "not a valid time"),
        (
            [
                ("x-mq-date-time", NOW),
                ("authorization", GOOD.replace("Credential=ak", "Credential=zz")),
            ],
            "unknown access key",
        ),
        (headers(NOW, secret="other-secret"), "wrong secret key"),
        (
            [("x-mq-date-time", NOW), ("authorization", GOOD), ("authorization", GOOD)],
            "more than one",
        ),
        ([("x-mq-date-time", NOW), ("authorization", GOOD + "0" * 2000)], "longer than"),
    ],
)
def test_forged_headers_are_refused_with_a_reason(metadata, message) -> None:
    with pytest.raises(UnauthorizedError, match=message):
        verifier().verify(metadata)


def test_signature_hex_is_case_insensitive() -> None:
    upper = GOOD.replace(SIG, SIG.upper())
    assert verifier().verify([("x-mq-date-time", NOW), ("authorization", upper)]) == "ak"
