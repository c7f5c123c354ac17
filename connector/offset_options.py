"""Where a read starts and ends, and which queues it reads: the offset options parsed.

* start: ``startingOffsets`` (``earliest`` | ``latest`` | ``group`` | JSON offsets),
  ``startingTimestamp`` (one epoch-ms time for every queue) or
  ``startingOffsetsByTimestamp`` (JSON, a time per queue: ``{"orders": {"broker-a:0":
  1700000000000}}``) — at most one of them;
* end (batch only): ``endingOffsets``, ``endingTimestamp`` or ``endingOffsetsByTimestamp``;
* ``startingOffsetsByTimestampStrategy``: what a starting time with no message stored at
  or after it means — ``error`` (the read fails naming the queue; Kafka's default, and
  ours for ``startingOffsetsByTimestamp``) or ``latest`` (the queue's end; our default
  for ``startingTimestamp``);
* ``startingOffsets=group`` (needs ``consumerGroup``): each queue starts at the group's
  committed offset; ``groupFallback`` (``earliest`` default | ``latest`` | ``error``) is
  where a queue the group never committed starts;
* ``assign``: ``{"orders": ["broker-a:0", "broker-a:3"]}``, the only queues read.

Queues a JSON value does not name start (or end) at the default: earliest for a batch
start, latest for a stream start and for every end. Pure: no network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from broker_core.errors import InvalidArgumentError
from broker_core.message import validate_topic_name
from connector.offsets import EARLIEST, LATEST, Offsets, QueueRef, from_json, parse_label
from connector.option_parse import option_error

SpecKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps", "group"]
PastEnd = Literal["error", "latest"]
GroupFallback = Literal["earliest", "latest", "error"]
STRATEGY: Final = "startingOffsetsByTimestampStrategy"


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: a policy, explicit offsets, times, or a group.

    ``offsets`` holds, per queue, an offset (kind ``offsets``; -2/-1 = earliest/latest)
    or an epoch-ms time (kind ``timestamps``); queues it does not name use ``default``.
    ``past_end`` applies to a starting time after a queue's last message;
    ``group_fallback`` to a queue without a committed offset (kind ``group``).
    """

    kind: SpecKind
    offsets: Offsets = field(default_factory=dict)
    timestamp_ms: int | None = None
    default: Literal["earliest", "latest"] = "latest"
    option: str = ""
    past_end: PastEnd = "latest"
    group_fallback: GroupFallback = "earliest"
    group: str | None = None  # kind group: the consumer group (consumerGroup)


def _epoch_ms(option: str, text: str) -> int:
    value = text.strip()
    if not (value.isascii() and value.isdigit()):
        raise option_error(
            option, f"must be epoch milliseconds (a non-negative integer), got {text!r}"
        )
    return int(value)


def _choice(given: Mapping[str, str], option: str, allowed: tuple[str, ...]) -> str | None:
    if option not in given:
        return None
    value = given[option].strip().lower()
    if value not in allowed:
        raise option_error(option, f"must be {' or '.join(allowed)}, got {given[option]!r}")
    return value


def _check_companions(given: Mapping[str, str], start_kind: SpecKind) -> None:
    """The strategy and fallback options only go with what they modify."""
    if STRATEGY in given and start_kind not in ("timestamp", "timestamps"):
        raise option_error(
            STRATEGY, "only applies with startingOffsetsByTimestamp or startingTimestamp"
        )
    if "groupFallback" in given and start_kind != "group":
        raise option_error("groupFallback", "only applies with startingOffsets=group")
    if start_kind == "group" and "consumerGroup" not in given:
        raise option_error(
            "startingOffsets", "'group' needs consumerGroup: the group whose offsets to start at"
        )


def parse_offset_spec(given: Mapping[str, str], *, start: bool, streaming: bool) -> OffsetSpec:
    """The start (``start``) or end of a read from the options (keyed by our names)."""
    prefix = "starting" if start else "ending"
    names = (f"{prefix}Offsets", f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp")
    default: Literal["earliest", "latest"] = "earliest" if start and not streaming else "latest"
    chosen = [name for name in names if name in given]
    if len(chosen) > 1:
        raise option_error(
            chosen[0], f"give only one of {', '.join(names)}; got {', '.join(chosen)}"
        )
    option = chosen[0] if chosen else names[0]
    past_end = _choice(given, STRATEGY, ("error", "latest"))
    if option == names[1]:
        spec = OffsetSpec(
            "timestamp",
            timestamp_ms=_epoch_ms(option, given[option]),
            default=default,
            option=option,
            past_end="error" if past_end == "error" else "latest",
        )
    elif option == names[2]:
        times = from_json(given[option], what=f"option {option!r}", value_name="timestamp")
        spec = OffsetSpec(
            "timestamps",
            offsets=times,
            default=default,
            option=option,
            past_end="latest" if past_end == "latest" else "error",
        )
    else:
        spec = _offsets(given.get(option, default), option, start=start, streaming=streaming)
    if start:
        _check_companions(given, spec.kind)
    if spec.kind == "group":
        fallback = _choice(given, "groupFallback", ("earliest", "latest", "error")) or "earliest"
        return OffsetSpec(
            "group",
            option=option,
            group_fallback=fallback,  # type: ignore[arg-type]
            group=given["consumerGroup"].strip(),
        )
    return spec


def _offsets(text: str, option: str, *, start: bool, streaming: bool) -> OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: a policy word or JSON offsets."""
    default: Literal["earliest", "latest"] = "earliest" if start and not streaming else "latest"
    text = text.strip()
    forbidden = "latest" if start and not streaming else ("earliest" if not start else "")
    words = ("earliest", "latest", "group") if start else ("earliest", "latest")
    if text.lower() in words:
        if text.lower() == forbidden:
            raise option_error(
                option,
                f"{text!r} is not allowed in a {'batch' if not streaming else 'stream'} query",
            )
        return OffsetSpec(text.lower(), default=default, option=option)  # type: ignore[arg-type]
    if not text.startswith("{"):
        raise option_error(
            option,
            f"must be {', '.join(words)} or a JSON object "
            f"{{topic: {{'broker:queueId': offset}}}}, got {text!r}",
        )
    offsets = from_json(text, what=f"option {option!r}", allow_special=True)
    bad = LATEST if forbidden == "latest" else (EARLIEST if forbidden == "earliest" else None)
    for ref, value in offsets.items():
        if value == bad:
            raise option_error(option, f"{value} ({forbidden}) is not allowed for {ref} here")
    return OffsetSpec("offsets", offsets=offsets, default=default, option=option)


def parse_assign(text: str) -> frozenset[QueueRef]:
    """The ``assign`` option: ``{"topic": ["broker:queueId", …]}``, at least one queue."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise option_error("assign", f"not valid JSON ({exc})") from None
    shape = 'an object {topic: [\'broker:queueId\', …]}, e.g. {"orders": ["broker-a:0"]}'
    if not isinstance(value, dict) or not value:
        raise option_error("assign", f"must be {shape}, got {text!r}")
    queues: set[QueueRef] = set()
    for topic, labels in value.items():
        try:
            validate_topic_name(topic)
        except InvalidArgumentError as exc:
            raise option_error("assign", str(exc)) from None
        if not isinstance(labels, list) or not labels:
            raise option_error("assign", f"topic {topic!r} must map to a non-empty list; {shape}")
        for label in labels:
            if not isinstance(label, str):
                raise option_error(
                    "assign", f"queue {label!r} of {topic!r} must be 'broker:queueId'"
                )
            queues.add(parse_label(topic, label, what="option 'assign'"))
    return frozenset(queues)
