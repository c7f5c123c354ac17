"""One message's timeline: client and broker trace records merged, ordered by time (pure).

Input: the trace messages a query of the trace topic by the message id returned, each as
its decoded records plus the trace message's born host and time (the host and, for old
SubAfter records without a timestamp, the time of a client record). Output: the events of
``rmq message trace``, each a dict with ``type`` (Pub, Stored, Delivered, Ack, Nack,
Retry, DLQ, Commit, Rollback, Timer, SubBefore, SubAfter; EndTransaction for a client's
UNKNOW), ``time_ms``, ``host``, ``source`` (client/broker) and, where they apply,
``topic``, ``group``, ``client_id``, ``attempt``, ``queue_id``, ``offset``, ``cost_ms``,
``status``; plus ``since_prev_ms``, the time from the previous event.

``messages`` must come in the order they were written (the trace topic has one queue: by
queue offset); events of the same millisecond keep that order, which for one broker's
records is the order its hooks saw them.

>>> from broker_core.protocol.trace import TraceRecord
>>> recs = [TraceRecord("Ack", 9, group="g", msg_id="M"), TraceRecord("Pub", 5, msg_id="M")]
>>> [(e["type"], e["since_prev_ms"]) for e in timeline("M", [(recs, "10.0.0.1:5", 0)])]
[('Pub', 0), ('Ack', 4)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker_core.protocol.trace import BROKER_TYPES, TraceRecord

_TX_TYPES = {"COMMIT_MESSAGE": "Commit", "ROLLBACK_MESSAGE": "Rollback"}

TraceMessage = tuple[list[TraceRecord], str, int]  # (records, born host, born time ms)


def _client_event(
    r: TraceRecord, host: str, born_ms: int, groups: dict[str, str]
) -> dict[str, Any]:
    ev: dict[str, Any] = {"source": "client", "time_ms": r.time_ms or born_ms, "host": host}
    if r.region:
        ev["region"] = r.region  # a Spark task's query, batch and partition (connector)
    if r.request_id:
        ev["request_id"] = r.request_id
    if r.type == "Pub":
        ev.update(
            type="Pub",
            group=r.group,
            topic=r.topic,
            cost_ms=r.cost_ms,
            status="success" if r.success else "failed",
            store_host=r.host,
        )
        ev["host"] = r.client_host or host
    elif r.type == "SubBefore":
        ev.update(type="SubBefore", group=r.group, attempt=r.retry_times + 1)
    elif r.type == "SubAfter":
        ev.update(
            type="SubAfter",
            group=groups.get(r.request_id, ""),
            cost_ms=r.cost_ms,
            status="success" if r.success else "failed",
        )
    else:
        ev.update(
            type=_TX_TYPES.get(r.transaction_state, "EndTransaction"),
            group=r.group,
            topic=r.topic,
            status=r.transaction_state + (" (check)" if r.from_check else ""),
        )
    return ev


def _broker_event(r: TraceRecord) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "source": "broker",
        "type": r.type,
        "time_ms": r.time_ms,
        "host": r.host,
        "broker": r.region,
        "topic": r.topic,
    }
    for name, value, unset in (
        ("group", r.group, ""),
        ("client_id", r.client_id, ""),
        ("attempt", r.attempt, 0),
        ("queue_id", r.queue_id, -1),
        ("offset", r.offset, -1),
        ("cost_ms", r.cost_ms, -1),
        ("status", r.status, ""),
    ):
        if value != unset:
            ev[name] = value
    return ev


def timeline(msg_id: str, messages: Iterable[TraceMessage]) -> list[dict[str, Any]]:
    """The events of ``msg_id`` in the trace messages, ordered (see the module docstring)."""
    found = [(r, host, born) for recs, host, born in messages for r in recs if r.msg_id == msg_id]
    groups = {r.request_id: r.group for r, _h, _b in found if r.type == "SubBefore"}
    events = [
        _broker_event(r) if r.type in BROKER_TYPES else _client_event(r, host, born, groups)
        for r, host, born in dict.fromkeys(found)  # a trace message read twice counts once
    ]
    events.sort(key=lambda e: e["time_ms"])  # stable: ties keep the order written
    previous = events[0]["time_ms"] if events else 0
    for ev in events:
        ev["since_prev_ms"] = ev["time_ms"] - previous
        previous = ev["time_ms"]
    return events
