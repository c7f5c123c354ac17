"""Retry backoff, dead-letter decisions and delay levels (pure functions, no I/O).

Counting convention used throughout: a message's *delivery attempt* ``d`` is how
many times it has been delivered so far (``d = 1`` means the first delivery just
failed). The retry that follows is *retry number* ``k = d``, and the redelivered
message carries ``reconsume_times = k``. With ``max_retries = r`` a message is
delivered at most ``r + 1`` times; the failure of delivery ``r + 1`` sends it to
the dead-letter queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from broker_core.errors import ConfigError, InvalidArgumentError
from broker_core.protocol.durations import parse_backoff, parse_duration_ms
from broker_core.protocol.group_topics import (  # noqa: F401  (re-exported: broker API)
    DLQ_PREFIX,
    RETRY_PREFIX,
    dlq_topic,
    group_of_retry_topic,
    is_dlq_topic,
    is_retry_topic,
    retry_topic,
)

# --------------------------------------------------------------------------- delay levels

DELAY_LEVELS: tuple[str, ...] = (
    *("1s", "5s", "10s", "30s"),
    *("1m", "2m", "3m", "4m", "5m", "6m", "7m", "8m", "9m", "10m", "20m", "30m"),
    *("1h", "2h"),
)
DELAY_LEVELS_MS: tuple[int, ...] = tuple(parse_duration_ms(level) for level in DELAY_LEVELS)
MAX_DELAY_LEVEL = len(DELAY_LEVELS)


def _check_level(level: int) -> int:
    """Return ``level`` if it is an int in 1..18, else raise InvalidArgumentError."""
    if isinstance(level, bool) or not isinstance(level, int):
        raise InvalidArgumentError(f"delay level must be an int, got {level!r}")
    if not 1 <= level <= MAX_DELAY_LEVEL:
        raise InvalidArgumentError(f"delay level must be in 1..{MAX_DELAY_LEVEL}, got {level}")
    return level


def delay_level_ms(level: int) -> int:
    """Return the delay of 1-based ``level`` in ms; InvalidArgumentError outside 1..18."""
    return DELAY_LEVELS_MS[_check_level(level) - 1]


def schedule_queue_id(level: int) -> int:
    """Return the schedule-topic queue id of ``level`` (``level - 1``); validates as above."""
    return _check_level(level) - 1


# --------------------------------------------------------------------------- backoffs

MAX_RETRIES_LIMIT = 1000
MAX_DELAY_MS = 7 * 86_400_000


def _require_int(name: str, value: object, low: int, high: int) -> int:
    """Return ``value`` if it is an int (not bool) in ``low..high``, else raise ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be in {low}..{high}, got {value}")
    return value


def _check_positive(name: str, value: int) -> None:
    """Raise InvalidArgumentError unless ``value`` is an int (not bool) >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class DelayLevelBackoff:
    """RocketMQ's default: retry ``k`` uses delay level ``min(k + 2, 18)`` (10s, 30s, ... 2h)."""

    kind: ClassVar[str] = "delay_level"
    FIRST_LEVEL: ClassVar[int] = 3

    def level_for_retry(self, retry: int) -> int:
        """Return the delay level of 1-based retry number ``retry``."""
        _check_positive("retry number", retry)
        return min(retry + self.FIRST_LEVEL - 1, MAX_DELAY_LEVEL)

    def delay_ms(self, retry: int) -> int:
        """Return the wait before 1-based retry number ``retry``."""
        return delay_level_ms(self.level_for_retry(retry))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form."""
        return {"type": self.kind}


@dataclass(frozen=True)
class CustomBackoff:
    """Explicit list: retry ``k`` waits ``delays_ms[k - 1]``; the last entry repeats."""

    kind: ClassVar[str] = "custom"
    delays_ms: tuple[int, ...]

    def __post_init__(self) -> None:
        """Raise ConfigError unless the list is non-empty with every delay in 0..7 days."""
        if isinstance(self.delays_ms, str | bytes) or not isinstance(self.delays_ms, Sequence):
            raise ConfigError(f"delays_ms must be a sequence of ints, got {self.delays_ms!r}")
        if not 1 <= len(self.delays_ms) <= MAX_RETRIES_LIMIT:
            raise ConfigError(f"delays_ms must hold 1..{MAX_RETRIES_LIMIT} entries")
        for delay in self.delays_ms:
            _require_int("custom delay", delay, 0, MAX_DELAY_MS)
        object.__setattr__(self, "delays_ms", tuple(self.delays_ms))

    def delay_ms(self, retry: int) -> int:
        """Return the wait before 1-based retry number ``retry``."""
        _check_positive("retry number", retry)
        return self.delays_ms[min(retry, len(self.delays_ms)) - 1]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form."""
        return {"type": self.kind, "delays_ms": list(self.delays_ms)}


@dataclass(frozen=True)
class ExponentialBackoff:
    """Retry ``k`` waits ``min(max_ms, round(initial_ms * multiplier ** (k - 1)))``."""

    kind: ClassVar[str] = "exponential"
    initial_ms: int
    multiplier: float
    max_ms: int

    def __post_init__(self) -> None:
        """ConfigError unless 1 <= initial_ms <= max_ms <= 7 days and 1 <= multiplier <= 100."""
        _require_int("initial_ms", self.initial_ms, 1, MAX_DELAY_MS)
        _require_int("max_ms", self.max_ms, self.initial_ms, MAX_DELAY_MS)
        multiplier = self.multiplier
        if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
            raise ConfigError(f"multiplier must be a number, got {multiplier!r}")
        if not (math.isfinite(multiplier) and 1.0 <= multiplier <= 100.0):
            raise ConfigError(f"multiplier must be in 1..100, got {multiplier}")
        object.__setattr__(self, "multiplier", float(multiplier))

    def delay_ms(self, retry: int) -> int:
        """Return the wait before 1-based retry number ``retry``."""
        _check_positive("retry number", retry)
        try:
            raw = self.initial_ms * self.multiplier ** (retry - 1)
        except OverflowError:
            return self.max_ms
        return min(self.max_ms, round(raw))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form."""
        return {
            "type": self.kind,
            "initial_ms": self.initial_ms,
            "multiplier": self.multiplier,
            "max_ms": self.max_ms,
        }


Backoff: TypeAlias = DelayLevelBackoff | CustomBackoff | ExponentialBackoff


def _only_keys(where: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    """Raise ConfigError if ``data`` has keys outside ``allowed``."""
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; allowed: {sorted(allowed)}")


def backoff_from_dict(data: Mapping[str, Any]) -> Backoff:
    """Rebuild a backoff from its ``to_dict()`` form; ConfigError on anything malformed."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"backoff must be an object, got {data!r}")
    kind = data.get("type")
    if kind == DelayLevelBackoff.kind:
        _only_keys("backoff", data, {"type"})
        return DelayLevelBackoff()
    if kind == CustomBackoff.kind:
        _only_keys("backoff", data, {"type", "delays_ms"})
        return CustomBackoff(data.get("delays_ms", ()))
    if kind == ExponentialBackoff.kind:
        keys = {"initial_ms", "multiplier", "max_ms"}
        _only_keys("backoff", data, keys | {"type"})
        missing = sorted(keys - set(data))
        if missing:
            raise ConfigError(f"exponential backoff is missing {missing}")
        return ExponentialBackoff(data["initial_ms"], data["multiplier"], data["max_ms"])
    valid = [DelayLevelBackoff.kind, CustomBackoff.kind, ExponentialBackoff.kind]
    raise ConfigError(f"unknown backoff type {kind!r}; valid: {', '.join(valid)}")


# --------------------------------------------------------------------------- policy

DEFAULT_MAX_RETRIES = 16


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before redelivering a failed message."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff: Backoff = field(default_factory=DelayLevelBackoff)

    def __post_init__(self) -> None:
        """Raise ConfigError unless max_retries is in 0..1000 and backoff is a known kind."""
        _require_int("max_retries", self.max_retries, 0, MAX_RETRIES_LIMIT)
        if not isinstance(self.backoff, DelayLevelBackoff | CustomBackoff | ExponentialBackoff):
            raise ConfigError(f"unknown backoff {self.backoff!r}")

    @classmethod
    def default(cls, max_retries: int = DEFAULT_MAX_RETRIES) -> RetryPolicy:
        """RocketMQ's delay-level backoff (10s, 30s, 1m, ... capped at 2h)."""
        return cls(max_retries, DelayLevelBackoff())

    @classmethod
    def custom(
        cls, delays: Sequence[int] | str, max_retries: int = DEFAULT_MAX_RETRIES
    ) -> RetryPolicy:
        """Explicit delays, given in ms or as a ``"1s,5s,10s"`` string; the last one repeats."""
        delays_ms = parse_backoff(delays) if isinstance(delays, str) else tuple(delays)
        return cls(max_retries, CustomBackoff(delays_ms))

    @classmethod
    def exponential(
        cls,
        initial_ms: int,
        multiplier: float,
        max_ms: int,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> RetryPolicy:
        """Exponential backoff ``initial_ms * multiplier ** (k - 1)`` capped at ``max_ms``."""
        return cls(max_retries, ExponentialBackoff(initial_ms, multiplier, max_ms))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict that :meth:`from_dict` turns back into an equal policy."""
        return {"max_retries": self.max_retries, "backoff": self.backoff.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryPolicy:
        """Rebuild a policy from :meth:`to_dict` output; absent keys take the defaults.

        Raises ConfigError for a non-mapping, unknown keys, or invalid values.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"retry policy must be an object, got {data!r}")
        _only_keys("retry policy", data, {"max_retries", "backoff"})
        backoff = backoff_from_dict(data["backoff"]) if "backoff" in data else DelayLevelBackoff()
        return cls(data.get("max_retries", DEFAULT_MAX_RETRIES), backoff)


@dataclass(frozen=True)
class Retry:
    """Redeliver after ``delay_ms``; the redelivered message has ``reconsume_times`` set."""

    delay_ms: int
    deliver_at_ms: int
    reconsume_times: int
    delay_level: int | None = None


@dataclass(frozen=True)
class DeadLetter:
    """Retries are exhausted: move the message to the group's DLQ topic."""


RetryDecision: TypeAlias = Retry | DeadLetter


def next_delivery(policy: RetryPolicy, delivery_attempt: int, now_ms: int) -> RetryDecision:
    """Decide what happens after delivery number ``delivery_attempt`` failed at ``now_ms``.

    Boundary: ``delivery_attempt <= policy.max_retries`` gives ``Retry`` with
    ``reconsume_times = delivery_attempt`` and ``deliver_at_ms = now_ms + delay_ms``;
    ``delivery_attempt > policy.max_retries`` gives ``DeadLetter`` (so
    ``max_retries = 0`` sends the first failure straight to the DLQ, and the
    default 16 allows 17 deliveries). ``delay_level`` is set only for the
    delay-level backoff. Raises InvalidArgumentError if ``delivery_attempt < 1``
    or ``now_ms < 0``.
    """
    _check_positive("delivery_attempt", delivery_attempt)
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise InvalidArgumentError(f"now_ms must be an int >= 0, got {now_ms!r}")
    if delivery_attempt > policy.max_retries:
        return DeadLetter()
    backoff = policy.backoff
    level = (
        backoff.level_for_retry(delivery_attempt)
        if isinstance(backoff, DelayLevelBackoff)
        else None
    )
    delay = backoff.delay_ms(delivery_attempt)
    return Retry(delay, now_ms + delay, delivery_attempt, level)
