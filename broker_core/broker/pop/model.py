"""The POP service's settings and what it hands out: :class:`PopConfig` (checked when made,
ConfigError), :class:`PoppedMessage` (one delivery with its receipt handle) and
:func:`check_int`, the argument check of the service's calls (InvalidArgumentError).

Values only; the server's converters and handlers import these without the service.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.errors import ConfigError, InvalidArgumentError
from broker_core.message import StoredMessage


@dataclass(frozen=True, slots=True)
class PopConfig:
    """Settings of the POP service; every field name carries its unit."""

    broker_name: str = "broker-a"
    revive_interval_ms: int = 1_000
    max_receive_count: int = 1_024
    max_invisible_ms: int = 12 * 3_600_000  # RocketMQ proxy's limit
    max_withheld_per_queue: int = 1_024
    revive_batch: int = 256

    def __post_init__(self) -> None:
        if not self.broker_name or len(self.broker_name.encode()) > 255:
            raise ConfigError("broker_name must be 1..255 bytes")
        for name in (
            "revive_interval_ms",
            "max_receive_count",
            "max_invisible_ms",
            "max_withheld_per_queue",
            "revive_batch",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be ≥ 1, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One message handed to a consumer, with what it needs to ack it."""

    message: StoredMessage
    topic: str  # the topic it was produced to (the original one for retry copies)
    receipt_handle: str
    delivery_attempt: int  # 1 on the first delivery
    invisible_until_ms: int

    @property
    def message_id(self) -> str:
        return self.message.message_id


def check_int(name: str, value: int, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) in ``low..high``, else InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an int in {low}..{high}, got {value!r}")
    return value
