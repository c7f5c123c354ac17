"""``HOST:PORT`` addresses, parsed and range-checked in one place.

Every address a user gives (``--listen``, ``--advertise``, ``endpoints``, the broker's
``endpoint`` setting) goes through :func:`parse_host_port`. Ports outside 1..65535 are
refused instead of wrapping around (gRPC would bind ``:99999`` to 34463); port 0 means
"any free port" and is accepted only where the caller binds (``allow_any_port``).

    >>> parse_host_port("127.0.0.1:8081")
    ('127.0.0.1', 8081)
    >>> parse_host_port("[::1]:0", allow_any_port=True)
    ('[::1]', 0)
    >>> parse_host_port("127.0.0.1:99999", what="--listen")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    broker_core.errors.InvalidArgumentError: --listen must be HOST:PORT with a port in 1..65535, ...
"""

from __future__ import annotations

from typing import Final

from broker_core.errors import InvalidArgumentError

MAX_PORT: Final = 65_535


def parse_host_port(
    text: str,
    *,
    what: str = "address",
    allow_any_port: bool = False,
    allow_empty_host: bool = False,
) -> tuple[str, int]:
    """Split ``HOST:PORT`` into (host, port); InvalidArgumentError naming ``what`` otherwise.

    The port must be decimal digits in 1..65535, or 0 when ``allow_any_port``. The host
    must be non-empty unless ``allow_empty_host`` (a listen address ``:8081``).
    """
    host, sep, port = text.strip().rpartition(":")
    lowest = 0 if allow_any_port else 1
    valid_port = port.isascii() and port.isdigit() and lowest <= int(port) <= MAX_PORT
    if not sep or not valid_port or not (host or allow_empty_host):
        zero = " (0 = any free port)" if allow_any_port else ""
        raise InvalidArgumentError(
            f"{what} must be HOST:PORT with a port in 1..{MAX_PORT}{zero}, got {text!r}"
        )
    return host, int(port)
