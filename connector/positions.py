"""Positions that need the brokers: the queues of an ``assign``, starting and ending
times per queue, and a consumer group's committed offsets.

* :func:`discover`: ``[min, max)`` of every queue the read covers (the subscribed
  topics' queues, narrowed to the ``assign`` list when one is given).
* :func:`resolve_times`: ``startingTimestamp`` / ``…OffsetsByTimestamp``: per queue, the
  first offset stored at or after the time (``QueryOffset`` with policy TIMESTAMP). A
  starting time after a queue's last message is an error, or the queue's end with
  ``startingOffsetsByTimestampStrategy=latest``; an ending time there is the queue's end.
* :func:`resolve_group`: ``startingOffsets=group``: each queue at the group's committed
  offset (``GroupProgress`` of each broker: it lists exactly the queues with a commit,
  so ``rmq offset reset`` steers where a new query starts); a queue without a commit
  starts as ``groupFallback`` says. A committed offset beyond a queue's end (the queue
  was recreated) starts at the end; one below its minimum is data loss, handled where
  the range is read (``failOnDataLoss``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from broker_core.errors import ConfigError, GroupNotFoundError, OffsetOutOfRangeError
from connector.offsets import Offsets, QueueRef
from connector.options import OffsetSpec, ReadOptions

if TYPE_CHECKING:
    from connector.brokers import Bounds, BrokerSet

log = logging.getLogger(__name__)


def discover(options: ReadOptions, brokers: BrokerSet, *, require_assigned: bool) -> Bounds:
    """Bounds of every queue read. With ``require_assigned`` (planning a batch or a new
    stream), an assigned queue no broker serves is a ConfigError naming ``assign``."""
    topics = brokers.topics(options)
    bounds = brokers.bounds(topics, explicit=options.topics is not None)
    if options.assigned is None:
        return bounds
    missing = sorted(options.assigned - bounds.keys())
    if missing and require_assigned:
        served = ", ".join(ref.label for ref in sorted(bounds) if ref.topic == missing[0].topic)
        raise ConfigError(
            f"option 'assign': {', '.join(map(str, missing))} is not served by any broker "
            f"(queues of {missing[0].topic}: {served or 'none'})"
        )
    return {ref: bounds[ref] for ref in sorted(options.assigned & bounds.keys())}


def _default(spec: OffsetSpec, low: int, high: int) -> int:
    return low if spec.default == "earliest" else high


def resolve_times(spec: OffsetSpec, bounds: Bounds, brokers: BrokerSet) -> Offsets:
    """Offsets of a ``timestamp`` (every queue) or ``timestamps`` (per queue) spec."""
    if spec.kind == "timestamp":
        assert spec.timestamp_ms is not None
        times = dict.fromkeys(bounds, spec.timestamp_ms)
    else:
        times = dict(spec.offsets)
    by_time: dict[int, list[QueueRef]] = defaultdict(list)
    for ref, at_ms in sorted(times.items()):
        by_time[at_ms].append(ref)
    found: Offsets = {}
    for at_ms, refs in by_time.items():
        found.update(brokers.offsets_at(refs, at_ms))
    starting = spec.option.startswith("starting")
    past = sorted(ref for ref in found if found[ref] >= bounds[ref][1])
    if starting and past and spec.past_end == "error":
        raise OffsetOutOfRangeError(
            f"option {spec.option!r}: no message stored at or after the given time in "
            f"{', '.join(f'{ref} (at {times[ref]})' for ref in past)}; set "
            f"startingOffsetsByTimestampStrategy=latest to start those queues at their end",
            min_offset=-1,
            max_offset=-1,
        )
    return {ref: found.get(ref, _default(spec, low, high)) for ref, (low, high) in bounds.items()}


def committed_offsets(brokers: BrokerSet, group: str, refs: set[QueueRef]) -> Offsets:
    """``group``'s committed offset in each queue of ``refs`` that has one."""
    committed: Offsets = {}
    for broker in sorted({ref.broker for ref in refs}):
        try:
            rows = brokers.client_of(broker).group_progress(group)["queues"]
        except GroupNotFoundError:
            continue  # the group never committed on this broker
        for row in rows:
            ref = QueueRef(str(row["topic"]), broker, int(row["queue_id"]))
            if ref in refs:
                committed[ref] = int(row["consumer_offset"])
    return committed


def resolve_group(spec: OffsetSpec, bounds: Bounds, brokers: BrokerSet) -> Offsets:
    """Offsets of a ``group`` spec: committed offsets, ``groupFallback`` for the rest."""
    assert spec.group is not None
    committed = committed_offsets(brokers, spec.group, set(bounds))
    missing = sorted(set(bounds) - committed.keys())
    if missing and spec.group_fallback == "error":
        raise ConfigError(
            f"option 'startingOffsets': consumer group {spec.group!r} has no committed offset "
            f"in {', '.join(map(str, missing))}; commit one (rmq offset reset) or set "
            f"groupFallback=earliest or latest"
        )
    out: Offsets = {}
    for ref, (low, high) in bounds.items():
        if ref not in committed:
            out[ref] = low if spec.group_fallback == "earliest" else high
        elif committed[ref] > high:
            log.warning(
                "rocketmq source: %s: group %s committed %d beyond the queue's end %d; "
                "starting at the end",
                ref,
                spec.group,
                committed[ref],
                high,
            )
            out[ref] = high
        else:
            out[ref] = committed[ref]
    return out
