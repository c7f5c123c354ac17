"""One message's trace records, found in the trace topic by three kinds of key (pure).

The clients index their trace messages by the traced message id; the broker its own by
the id's bucket, and a pull that returned a run of consecutive offsets by the places the
run covers (``trace_runs``): such a run is one record with
no message id. :func:`lookup` queries the id and its bucket, reads from the records found
where the message was stored (Stored, Retry, DLQ, Timer, Commit: topic, queue, offset;
an append's run record, ``trace_runs.stored_blocks``, gives the message's own),
queries those places' pull keys, and turns each pull run that covers a place into a
Delivered record of this message at that offset (status ``pull``), in place, so the
trace messages keep the order they were written in (``trace_timeline``).

>>> from broker_core.protocol.trace import TraceRecord
>>> from broker_core.protocol.trace_runs import bucket_key, pull_key
>>> stored = TraceRecord("Stored", 5, topic="t", msg_id="M1", queue_id=0, offset=7)
>>> run = TraceRecord("Delivered", 9, group="g", topic="t", queue_id=0, offset=0, status="pull 10")
>>> index = {bucket_key("M1"): [(0, [stored], "", 0)], pull_key("t", 0, 7): [(1, [run], "", 0)]}
>>> [(r.type, r.msg_id, r.offset, r.status) for recs, _h, _b in lookup("M1", lambda k:
...     index.get(k, [])) for r in recs]
[('Stored', 'M1', 7, ''), ('Delivered', 'M1', 7, 'pull')]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from broker_core.protocol.trace import TraceRecord
from broker_core.protocol.trace_runs import (
    PULL_STATUS,
    bucket_key,
    expand_run,
    pull_key,
    pull_run,
)
from broker_core.protocol.trace_timeline import TraceMessage

# a trace message found: (its queue offset in the trace topic, records, born host, born ms)
Found = tuple[int, list[TraceRecord], str, int]
Query = Callable[[str], Iterable[Found]]
Place = tuple[str, int, int]  # (topic, queue id, queue offset)

PLACED = frozenset({"Stored", "Retry", "DLQ", "Timer", "Commit"})


def lookup(msg_id: str, query: Query) -> list[TraceMessage]:
    """The trace messages that hold records of ``msg_id``, in the order written, pull
    runs that delivered it turned into its own Delivered records."""
    found: dict[int, Found] = {}
    for key in (msg_id, bucket_key(msg_id)):
        found.update((at, (at, _own(recs, msg_id), h, b)) for at, recs, h, b in query(key))
    places = {
        (r.topic, r.queue_id, r.offset)
        for _, records, _, _ in found.values()
        for r in records
        if r.msg_id == msg_id and r.type in PLACED and r.queue_id >= 0 and r.offset >= 0
    }
    for topic, queue_id, offset in places:
        for at, records, host, born in query(pull_key(topic, queue_id, offset)):
            found.setdefault(at, (at, _own(records, msg_id), host, born))
    return [
        ([_as_delivery(r, msg_id, places) for r in found[at][1]], found[at][2], found[at][3])
        for at in sorted(found)
    ]


def _own(records: list[TraceRecord], msg_id: str) -> list[TraceRecord]:
    """``records``, each run record that lists ``msg_id`` replaced by its own record."""
    return [expand_run(r, msg_id) or r for r in records]


def _as_delivery(record: TraceRecord, msg_id: str, places: set[Place]) -> TraceRecord:
    """``record`` itself, or when it is a pull run covering one of ``places``, the
    Delivered record of ``msg_id`` there."""
    run = pull_run(record)
    if run is None:
        return record
    for topic, queue_id, offset in places:
        if topic == record.topic and queue_id == record.queue_id and offset in run:
            return dataclasses.replace(record, msg_id=msg_id, offset=offset, status=PULL_STATUS)
    return record
