"""Pure timer policy: the timer message rewrite, slot times, link targets, firing plans.

No I/O and no state: :mod:`broker_core.broker.timer.timer` carries these decisions out over the
timer log and the timing wheel. Everything here is table-tested.

>>> slot_time_ms(1_500, 1_000), slot_time_ms(2_000, 1_000)
(2000, 2000)
>>> link_target_ms(5_500, read_time_ms=3_000, horizon_ms=10_000, precision_ms=1_000)
6000
>>> link_target_ms(60_000, 3_000, 10_000, 1_000), link_target_ms(1_500, 3_000, 10_000, 1_000)
(10000, None)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker_core.broker.system_topics import TIMER_TOPIC
from broker_core.broker.timer.log import FLAG_CANCEL, TimerRecord
from broker_core.errors import InvalidArgumentError
from broker_core.message import (
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_ID,
    PROPERTY_UNIQ_KEY,
    Message,
    new_message_id,
)
from broker_core.protocol.properties import PROPERTY_TIMER_DELIVER_MS

TIMER_PROPERTIES = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TIMER_ID,
    PROPERTY_TIMER_DELIVER_MS,
)


def parse_deliver_ms(text: str) -> int:
    """A delivery time property as ms since the epoch; InvalidArgumentError if malformed."""
    if not text.isdigit():
        raise InvalidArgumentError(f"delivery time must be ms since the epoch, got {text!r}")
    return int(text)


def deliver_time_of(properties: dict[str, str]) -> int:
    """The due time of a timer message (``TIMER_DELIVER_MS``, else ``__STARTDELIVERTIME``)."""
    raw = properties.get(PROPERTY_TIMER_DELIVER_MS) or properties.get(PROPERTY_DELIVER_TIME_MS)
    if raw is None:
        raise InvalidArgumentError("message has no delivery time")
    return parse_deliver_ms(raw)


def to_timer_message(msg: Message, deliver_at_ms: int | None = None) -> Message:
    """The message to store instead of ``msg`` so that it is delivered at ``deliver_at_ms``.

    Without ``deliver_at_ms`` the ``__STARTDELIVERTIME`` property is used. ``msg`` is
    not modified; a fresh ``UNIQ_KEY`` is assigned when it has none (the timer id).
    """
    if deliver_at_ms is None:
        deliver_at_ms = parse_deliver_ms(msg.properties.get(PROPERTY_DELIVER_TIME_MS, ""))
    if isinstance(deliver_at_ms, bool) or not isinstance(deliver_at_ms, int) or deliver_at_ms < 0:
        raise InvalidArgumentError(f"deliver_at_ms must be an int ≥ 0, got {deliver_at_ms!r}")
    props = dict(msg.properties)
    timer_id = props.get(PROPERTY_UNIQ_KEY) or new_message_id()
    props[PROPERTY_UNIQ_KEY] = timer_id
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    props[PROPERTY_TIMER_ID] = timer_id
    props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_at_ms)
    return dataclasses.replace(msg, topic=TIMER_TOPIC, queue_id=0, properties=props)


def slot_time_ms(deliver_ms: int, precision_ms: int) -> int:
    """The slot a timer fires in: ``deliver_ms`` rounded up to a multiple of the precision."""
    return -(-deliver_ms // precision_ms) * precision_ms


def link_target_ms(
    deliver_ms: int, read_time_ms: int, horizon_ms: int, precision_ms: int
) -> int | None:
    """Slot time to chain a timer into; None when it is due now (its slot has fired).

    ``read_time_ms`` is the next slot time to fire and ``horizon_ms`` the farthest slot
    time that may be linked. A timer beyond the horizon goes to the horizon slot and is
    rolled on when that slot fires.
    """
    target = slot_time_ms(deliver_ms, precision_ms)
    if target < read_time_ms:
        return None
    return min(target, horizon_ms)


@dataclass(slots=True)
class FiringPlan:
    """What firing one slot does: records to deliver (in order) and records to roll."""

    deliver: list[TimerRecord] = field(default_factory=list)
    roll: list[TimerRecord] = field(default_factory=list)
    recalled: int = 0
    duplicates: int = 0


def plan_firing(
    chain: Sequence[tuple[int, TimerRecord]], slot_time: int, precision_ms: int
) -> FiringPlan:
    """Decide what firing ``slot_time`` does with its chain of ``(position, record)``.

    Cancelled timers (a cancel record with the same commitlog offset) are dropped; a
    timer chained twice (re-ingested after a crash) is delivered once; records whose
    slot time is later than ``slot_time`` are rolled (cancel records too, so they keep
    meeting their timer). Deliveries are ordered by due time, then by append order.
    """
    plan = FiringPlan()
    cancelled = {rec.phys_offset for _, rec in chain if rec.flags == FLAG_CANCEL}
    seen: set[int] = set()
    for _, rec in sorted(chain, key=lambda item: (item[1].deliver_ms, item[0])):
        later = slot_time_ms(rec.deliver_ms, precision_ms) > slot_time
        if rec.flags == FLAG_CANCEL:
            if later:
                plan.roll.append(rec)
        elif rec.phys_offset in cancelled:
            plan.recalled += 1
        elif rec.phys_offset in seen:
            plan.duplicates += 1
        else:
            seen.add(rec.phys_offset)
            (plan.roll if later else plan.deliver).append(rec)
    return plan
