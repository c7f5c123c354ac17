"""The primitives every option of the ``rocketmq`` source and sink is parsed with.

One place for what a value of each kind looks like and how its error reads: every error
is a :class:`~broker_core.errors.ConfigError` whose message starts ``option 'name':``, so
the user sees which option to fix. The readers' and the writer's option modules
(``options.py``, ``offset_options.py``, ``credentials.py``, ``sink_options.py``) say which
option is of which kind; they parse nothing themselves.

>>> boolean("exactlyOnce", " TRUE ")
True
>>> int_in("batchSize", "64", 1, 1024), positive_int("maxMessagesPerTrigger", "10")
(64, 10)
>>> byte_count("maxBytesPerTrigger", "64m")
67108864
>>> parse_namesrv("h1:9876, h2:9876")
'h1:9876;h2:9876'
>>> int_in("batchSize", "0", 1, 1024)
Traceback (most recent call last):
...
broker_core.errors.ConfigError: option 'batchSize': must be in [1, 1024], got 0
"""

from __future__ import annotations

import re
from typing import Final

from broker_core.client import parse_endpoint
from broker_core.errors import ConfigError, InvalidArgumentError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.durations import parse_duration_ms

_BYTE_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
}
_BYTES_RE: Final = re.compile(r"(\d+)\s*([a-z]*)")


def option_error(option: str, problem: str) -> ConfigError:
    """The error of a bad ``option``: its message names the option first."""
    return ConfigError(f"option {option!r}: {problem}")


def boolean(option: str, text: str) -> bool:
    """``true`` or ``false`` (any case, spaces around ignored)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise option_error(option, f"must be true or false, got {text!r}")
    return value == "true"


def positive_int(option: str, text: str) -> int:
    """A decimal integer ≥ 1 (digits only: no sign, no underscores)."""
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise option_error(option, f"must be a positive integer, got {text!r}")
    return int(value)


def int_in(option: str, text: str, low: int, high: int) -> int:
    """An integer in ``[low, high]``."""
    try:
        value = int(text.strip())
    except ValueError:
        raise option_error(option, f"must be an integer, got {text!r}") from None
    if not low <= value <= high:
        raise option_error(option, f"must be in [{low}, {high}], got {value}")
    return value


def byte_count(option: str, text: str) -> int:
    """A positive byte count: ``1048576``, ``512k``, ``64m``, ``1g`` (binary units)."""
    match = _BYTES_RE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _BYTE_UNITS or int(match.group(1)) < 1:
        raise option_error(
            option, f"must be a positive byte count such as 1048576, 512k, 64m or 1g, got {text!r}"
        )
    return int(match.group(1)) * _BYTE_UNITS[match.group(2)]


def duration_ms(option: str, text: str) -> int:
    """A positive duration (``parse_duration_ms``: ``500ms``, ``30s``, ``15m`` …) in ms."""
    try:
        value = parse_duration_ms(text)
    except InvalidArgumentError as exc:
        raise option_error(option, str(exc)) from None
    if value < 1:
        raise option_error(option, f"must be longer than 0, got {text!r}")
    return value


def topic_name(option: str, text: str) -> str:
    """A topic name the broker accepts (``validate_topic_name``), as given."""
    try:
        validate_topic_name(text)
    except InvalidArgumentError as exc:
        raise option_error(option, str(exc)) from None
    return text


def group_name(option: str, text: str) -> str:
    """A group name the broker accepts (``validate_group_name``), as given."""
    try:
        return validate_group_name(text)
    except InvalidArgumentError as exc:
        raise option_error(option, str(exc)) from None


def parse_endpoints(text: str) -> tuple[str, ...]:
    """The ``endpoints`` option: ``host:port[,host:port]``, duplicates dropped, in order."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise option_error("endpoints", f"must be host:port[,host:port], got {text!r}")
    try:
        return tuple(dict.fromkeys(parse_endpoint(p) for p in parts))
    except InvalidArgumentError as exc:
        raise option_error("endpoints", str(exc)) from None


def parse_namesrv(text: str) -> str:
    """The ``namesrv`` option: ``host:port[;host:port]`` (``,`` also separates), checked and
    normalised to ``;``-separated."""
    parts = [p.strip() for p in text.replace(",", ";").split(";")]
    if not text.strip() or any(not p for p in parts):
        raise option_error("namesrv", f"must be host:port[;host:port], got {text!r}")
    try:
        return ";".join(dict.fromkeys(parse_endpoint(p) for p in parts))
    except InvalidArgumentError as exc:
        raise option_error("namesrv", str(exc)) from None
