"""Duration parsing: ``"500ms"``, ``"10s"``, ``"1m"`` … into milliseconds (pure).

>>> parse_duration_ms("1.5s"), parse_backoff("1s, 5s")
(1500, (1000, 5000))
"""

from __future__ import annotations

import re
from fractions import Fraction

from broker_core.errors import InvalidArgumentError

_UNIT_MS: dict[str, int] = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", re.ASCII)


def parse_duration_ms(text: str) -> int:
    """Parse ``"500ms"``, ``"10s"``, ``"1m"``, ``"2h"``, ``"1d"`` or ``"1.5s"`` into milliseconds.

    A non-negative number followed by one of ``ms s m h d`` (case-insensitive,
    surrounding whitespace ignored). Raises InvalidArgumentError for anything else,
    including a value that is not a whole number of milliseconds (``"1.5ms"``).
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"duration must be a string, got {text!r}")
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None:
        raise InvalidArgumentError(
            f"bad duration {text!r}: expected a number and a unit (ms, s, m, h, d), e.g. '10s'"
        )
    value = Fraction(match.group(1)) * _UNIT_MS[match.group(2)]
    if value.denominator != 1:
        raise InvalidArgumentError(f"bad duration {text!r}: not a whole number of milliseconds")
    return value.numerator


def parse_backoff(text: str) -> tuple[int, ...]:
    """Parse a comma-separated list of durations (``"1s,5s,10s"``) into milliseconds.

    Raises InvalidArgumentError when the list is empty or any item is malformed.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(f"backoff list must be a non-empty string, got {text!r}")
    return tuple(parse_duration_ms(item) for item in text.split(","))
