"""RocketMQ 5's request signature: ``MQv2-HMAC-SHA1`` over the ``x-mq-date-time`` header.

What the official clients send on every RPC (``rocketmq/v5/util/signature.py``)::

    x-mq-date-time: 20240501T120000Z          (yyyyMMdd'T'HHmmss'Z')
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
                    Signature=<lower-case hex HMAC-SHA1(secretKey, x-mq-date-time)>

**Clock skew and the local-time quirk.** The stamp is meant to be UTC, but the official
*Python* client formats ``datetime.now()`` — the client machine's *local* time — with a
``Z`` suffix. A strict UTC check would therefore lock out every Python client outside
UTC. :class:`Verifier` accepts a stamp within ``max_skew_ms`` of the broker's UTC clock;
with ``accept_local_time`` (the default) it also accepts a stamp that is off by a whole
time-zone offset, i.e. anywhere from UTC−12:00 to UTC+14:00 around now, widened by the
skew. The price is a wider replay window: a captured header stays valid for up to 26 h
plus twice the skew instead of twice the skew. Brokers whose clients all stamp UTC (the
Java client, our client, the CLI, the Spark connector) should set
``[auth] accept_local_time = false``; use TLS so that headers cannot be captured.
The signature covers only the date-time (as in RocketMQ), not the request body.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from broker_core.errors import UnauthorizedError

ALGORITHM: Final = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER: Final = "x-mq-date-time"
AUTHORIZATION_HEADER: Final = "authorization"
MAX_HEADER_CHARS: Final = 1024
LOCAL_TIME_BEHIND_MS: Final = 12 * 3600 * 1000  # UTC−12:00, the westernmost zone
LOCAL_TIME_AHEAD_MS: Final = 14 * 3600 * 1000  # UTC+14:00, the easternmost zone

_STAMP = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z")
_HEADER = re.compile(
    r"MQv2-HMAC-SHA1 Credential=([^,\s]+), ?SignedHeaders=([^,\s]+), ?Signature=([0-9a-fA-F]+)"
)


def sign(secret_key: str, date_time: str) -> str:
    """Lower-case hex HMAC-SHA1 of ``date_time`` keyed by ``secret_key`` (both UTF-8)."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).hexdigest()


def utc_stamp(now_s: float | None = None) -> str:
    """``yyyyMMddTHHmmssZ`` of ``now_s`` (default: now) in UTC."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now_s is None else now_s))


def authorization(access_key: str, secret_key: str, date_time: str) -> str:
    """The ``authorization`` header value for one request stamped ``date_time``."""
    return (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )


def signed_metadata(access_key: str, secret_key: str) -> list[tuple[str, str]]:
    """The two headers that sign one request now (UTC stamp)."""
    stamp = utc_stamp()
    return [
        (DATE_TIME_HEADER, stamp),
        (AUTHORIZATION_HEADER, authorization(access_key, secret_key, stamp)),
    ]


@dataclass(frozen=True, slots=True)
class Credential:
    """A parsed ``authorization`` header."""

    access_key: str
    signed_headers: str
    signature: str


def parse_authorization(value: str) -> Credential:
    """Parse the header; UnauthorizedError saying what is wrong with it."""
    if len(value) > MAX_HEADER_CHARS:
        raise UnauthorizedError(f"authorization header longer than {MAX_HEADER_CHARS} chars")
    if not value.startswith(ALGORITHM + " "):
        algorithm = value.split(" ", 1)[0][:40]
        raise UnauthorizedError(
            f"unsupported signature algorithm {algorithm!r}; expected {ALGORITHM}"
        )
    match = _HEADER.fullmatch(value.strip())
    if match is None:
        raise UnauthorizedError(
            "malformed authorization header; expected "
            f"'{ALGORITHM} Credential=<accessKey>, SignedHeaders="
            f"{DATE_TIME_HEADER}, Signature=<hex>'"
        )
    access_key, headers, signature = match.groups()
    if headers.lower() != DATE_TIME_HEADER:
        raise UnauthorizedError(f"SignedHeaders must be {DATE_TIME_HEADER}, got {headers[:60]!r}")
    return Credential(access_key, headers, signature.lower())


def stamp_ms(date_time: str) -> int:
    """Epoch ms of a ``yyyyMMddTHHmmssZ`` stamp; UnauthorizedError if it is not one."""
    match = _STAMP.fullmatch(date_time)
    if match is None:
        raise UnauthorizedError(
            f"{DATE_TIME_HEADER} must be yyyyMMddTHHmmssZ, got {date_time[:40]!r}"
        )
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        raise UnauthorizedError(f"{DATE_TIME_HEADER} is not a valid time: {date_time!r}")
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) * 1000


class Verifier:
    """Checks a request's headers against the users' secret keys.

    ``secret_of(access_key)`` returns the user's secret key, or None for an unknown key.
    """

    def __init__(
        self,
        secret_of: Callable[[str], str | None],
        *,
        max_skew_ms: int = 900_000,
        accept_local_time: bool = True,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.secret_of = secret_of
        self.max_skew_ms = max_skew_ms
        self.accept_local_time = accept_local_time
        self.clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)

    def window_ms(self, now_ms: int) -> tuple[int, int]:
        """The oldest and newest stamp (epoch ms, read as UTC) accepted at ``now_ms``."""
        behind = self.max_skew_ms + (LOCAL_TIME_BEHIND_MS if self.accept_local_time else 0)
        ahead = self.max_skew_ms + (LOCAL_TIME_AHEAD_MS if self.accept_local_time else 0)
        return now_ms - behind, now_ms + ahead

    def verify(self, metadata: Iterable[tuple[str, str | bytes]]) -> str:
        """The access key of a correctly signed, fresh request; UnauthorizedError else."""
        headers: dict[str, str] = {}
        for key, value in metadata:
            if key in (AUTHORIZATION_HEADER, DATE_TIME_HEADER) and isinstance(value, str):
                if key in headers:
                    raise UnauthorizedError(f"more than one {key} header")
                headers[key] = value
        header = headers.get(AUTHORIZATION_HEADER)
        if header is None:
            raise UnauthorizedError(
                "authentication is on and the request is not signed "
                "(no authorization header); give an access key and "
                "secret key"
            )
        credential = parse_authorization(header)
        date_time = headers.get(DATE_TIME_HEADER)
        if date_time is None:
            raise UnauthorizedError(f"signed request without the {DATE_TIME_HEADER} header")
        stamped = stamp_ms(date_time)
        oldest, newest = self.window_ms(self.clock_ms())
        if not oldest <= stamped <= newest:
            raise UnauthorizedError(
                f"request time {date_time} is outside the accepted clock "
                f"skew; check the client's clock"
            )
        secret = self.secret_of(credential.access_key)
        if secret is None:
            raise UnauthorizedError(f"unknown access key {credential.access_key[:64]!r}")
        if not hmac.compare_digest(sign(secret, date_time), credential.signature):
            raise UnauthorizedError(
                f"signature mismatch for access key {credential.access_key!r}: wrong secret key"
            )
        return credential.access_key
