"""Source offsets: one position per message queue, as the JSON Spark checkpoints.

An offset is a dict ``{topic: {"<broker>:<queueId>": next offset to read}}``::

    {"orders": {"broker-a:0": 1200, "broker-a:1": 980}}

Each number is the queue offset of the first message *not yet* read, so a batch reads
``[start, end)`` of every queue and a restart continues exactly at the checkpointed
numbers. Topics and queues are always written in sorted order (queue ids numerically),
because Spark compares offsets as JSON text: the same positions must always produce the
same string. A queue missing from a start offset but present in an end offset is new
and is read from offset 0, its first offset.

User-written offsets (the ``startingOffsets`` / ``endingOffsets`` options) use the same
shape and may also say ``-2`` (earliest) or ``-1`` (latest) for a queue, as Kafka's do.

Everything here is pure: no network, no state.

>>> start = from_json({"orders": {"broker-a:1": 3, "broker-a:0": 5}}, what="offset")
>>> to_json(start)
{'orders': {'broker-a:0': 5, 'broker-a:1': 3}}
>>> split_budget({"q0": 90, "q1": 10}, 10)
{'q0': 9, 'q1': 1}
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any, Final, NamedTuple, TypeVar

from broker_core.errors import ConfigError

EARLIEST: Final = -2
LATEST: Final = -1

K = TypeVar("K", bound=Hashable)


class QueueRef(NamedTuple):
    """One message queue: its topic, the broker holding it, and its id there."""

    topic: str
    broker: str
    queue_id: int

    @property
    def label(self) -> str:
        """The queue's key inside its topic's offset dict: ``broker-a:0``."""
        return f"{self.broker}:{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic} {self.label}"


Offsets = dict[QueueRef, int]


def parse_label(topic: str, label: str, *, what: str) -> QueueRef:
    """``QueueRef`` of ``"broker-a:0"`` in ``topic``; ConfigError naming ``what`` otherwise."""
    broker, sep, queue = label.rpartition(":")
    if not sep or not broker or not (queue.isascii() and queue.isdigit()):
        raise ConfigError(
            f"{what}: queue key {label!r} of topic {topic!r} must be "
            f"'<broker>:<queueId>', e.g. 'broker-a:0'"
        )
    return QueueRef(topic, broker, int(queue))


def from_json(
    value: Any, *, what: str, allow_special: bool = False, value_name: str = "offset"
) -> Offsets:
    """Offsets from a JSON text or an already decoded dict.

    ``what`` names the origin (an option, or "checkpointed offset") in every error, and
    ``value_name`` what the numbers are (``timestamp`` for the ``…ByTimestamp`` options).
    With ``allow_special``, -2 (earliest) and -1 (latest) are accepted as well.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{what}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{what}: expected an object {{topic: {{'broker:queueId': {value_name}}}}}, "
            f"got {type(value).__name__}"
        )
    lowest = EARLIEST if allow_special else 0
    offsets: Offsets = {}
    for topic, queues in value.items():
        if not isinstance(queues, dict):
            raise ConfigError(
                f"{what}: topic {topic!r} must map to an object of 'broker:queueId' → {value_name}"
            )
        for label, offset in queues.items():
            ref = parse_label(topic, label, what=what)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest:
                allowed = (
                    "an integer ≥ -2 (-2 earliest, -1 latest)"
                    if allow_special
                    else ("an integer ≥ 0")
                )
                raise ConfigError(
                    f"{what}: {value_name} of {ref} must be {allowed}, got {offset!r}"
                )
            offsets[ref] = offset
    return offsets


def to_json(offsets: Mapping[QueueRef, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-ready dict: topics sorted, queues by (broker, id)."""
    out: dict[str, dict[str, int]] = {}
    for ref in sorted(offsets):
        out.setdefault(ref.topic, {})[ref.label] = int(offsets[ref])
    return out


def split_budget(backlog: Mapping[K, int], budget: int) -> dict[K, int]:
    """How many messages each queue may take when ``budget`` is less than the backlog.

    Shares are proportional to each queue's backlog (as Kafka's ``maxOffsetsPerTrigger``
    does), rounded down; what rounding leaves goes one by one to the largest remainders
    (ties in key order). The result never exceeds a queue's backlog and sums to
    ``min(budget, total backlog)``. Deterministic, so a replay plans the same batch.

    >>> split_budget({"a": 5, "b": 5, "c": 5}, 4)
    {'a': 2, 'b': 1, 'c': 1}
    >>> split_budget({"a": 3, "b": 0}, 100)
    {'a': 3, 'b': 0}
    """
    if budget < 0:
        raise ValueError(f"budget must be ≥ 0, got {budget}")
    wanted = {key: max(0, n) for key, n in backlog.items()}
    total = sum(wanted.values())
    if total <= budget:
        return wanted
    shares = {key: n * budget // total for key, n in wanted.items()}
    left = budget - sum(shares.values())
    order = sorted(wanted, key=lambda key: -((wanted[key] * budget) % total))  # stable
    for key in order:
        if left == 0:
            break
        if shares[key] < wanted[key]:
            shares[key] += 1
            left -= 1
    return shares
