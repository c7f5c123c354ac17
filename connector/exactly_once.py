"""The exactly-once commit protocol of the streaming sink (driver side).

Tasks send their rows as half messages (invisible) and report every half in their
:class:`TaskHalves` (the WriterCommitMessage). ``commit(messages, batchId)`` then runs
this protocol, in a fresh driver-side process, so everything durable lives on the broker:

1. Look for the batch's **intent record** in the sink's marker topic
   ``%SPARK_SINK%{sink}`` (``sink`` = option producerGroup, else the query id; one queue),
   found by the message key ``batch-{batchId}``.
2. None: this is the batch's first commit. Write the intent — every half of the batch
   (partition, row number, topic, message id, transaction id, body CRC, group) as one
   ``SendMessage`` of one or more chunk messages, which the broker stores whole or not at
   all. Writing it is the commit point: from then on the batch is decided, and only the
   halves it lists may become visible. Then commit those halves and write a **done** record.
3. An intent exists: the batch is being replayed (the driver died after deciding it, or
   Spark re-runs a batch whose commit it did not record). With a done record, roll back
   this attempt's halves. Without, finish the decision: commit every listed half again
   (an already committed one answers so, and is then left alone), and where a listed half
   was rolled back by the broker meanwhile, commit this attempt's half of the same
   partition and row if its body CRC is the same (a deterministic replay), recording these
   stand-ins in an **amend** record before committing them. Roll back the rest of this
   attempt, then write the done record.

Records are JSON chunk messages (≤ 4,000 halves each, all chunks of one record in one
request) with properties ``sparkBatchId``, ``sparkAttempt`` (the intent they belong to),
``sparkKind`` (intent | amend | done), ``sparkRecord`` and ``sparkChunks``; a lookup
returns at most 1,000 of them, which bounds a micro-batch to about 3.9 M rows.

Why this is atomic enough: before the intent exists nothing is visible and every half is
either rolled back by ``abort`` or, for tasks Spark never reported (killed executors, a
killed driver), by the broker's check-back, which finds no producer and rolls the half
back after ``transactionTimeoutMs + max_checks × check timeout``. After the intent exists,
the decision cannot be lost: whoever commits batch N next completes exactly that list.
The first commit refuses to write an intent for halves older than half of
``transactionTimeoutMs`` (they could expire mid-commit) and rolls the batch back instead.
``abort`` never rolls back a half listed in an intent (a replay will commit it).

Residual risks (documented, not hidden): a replay must be deterministic for the CRC
fallback; a second live producer of the target topic connected over Telemetry could be
asked about (and commit) an orphaned half; intents are looked up through the broker's
key index, so an ``abort`` in the same instant as the intent write may miss it.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.sql.datasource import WriterCommitMessage

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.errors import (
    RocketMQError,
    ServiceNotOfferedError,
    TopicNotFoundError,
    UnsupportedError,
)
from connector.transactions import EndOutcome, HalfRef, end, is_visible

log = logging.getLogger(__name__)

MARKER_TOPIC_PREFIX: Final = "%SPARK_SINK%"
INTENT_CHUNK_HALVES: Final = 4_000  # halves per intent message (≈ 400 KB of JSON)
END_PARALLELISM: Final = 8
VISIBILITY_POLLS: Final = 5  # a just-committed message reaches the index within ms
VISIBILITY_POLL_S: Final = 0.2


class TransactionLostError(RocketMQError):
    """Half messages of a decided batch were rolled back before they could be committed."""


class TransactionTimeoutError(RocketMQError):
    """A batch's halves are too old to commit safely; it was rolled back instead."""


@dataclass
class TaskHalves(WriterCommitMessage):
    """What one write task reports: its rows and, with exactlyOnce, its halves in row order.

    ``first_send_ms`` is the task's wall clock at its first send (0: nothing sent).
    """

    partition_id: int
    attempt: int
    rows: int
    query_id: str = ""
    batch_id: int = -1
    first_send_ms: int = 0
    halves: list[HalfRef] = field(default_factory=list)


Slot = tuple[int, int]  # (partition id, row number in the partition)


@dataclass(frozen=True, slots=True)
class Intent:
    """A decided batch: its halves by slot, and whether its done record exists."""

    attempt: str
    halves: dict[Slot, HalfRef]
    done: bool


def marker_topic(sink: str) -> str:
    return f"{MARKER_TOPIC_PREFIX}{sink}"


def batch_key(batch_id: int) -> str:
    return f"batch-{batch_id}"


def slots_of(messages: Iterable[WriterCommitMessage | None]) -> dict[Slot, HalfRef]:
    """Every half the tasks reported, by (partition, row number)."""
    out: dict[Slot, HalfRef] = {}
    for msg in messages:
        if isinstance(msg, TaskHalves):
            for seq, half in enumerate(msg.halves):
                out[(msg.partition_id, seq)] = half
    return out


# --------------------------------------------------------------------------- ending halves


def end_all(
    client: RocketMQClient, halves: Sequence[HalfRef], *, commit: bool
) -> dict[str, EndOutcome]:
    """End many halves in parallel; halves of one (topic, message group) in list order.

    Returns the outcome per message id; broker errors other than "not found" propagate.
    """
    lanes: dict[tuple[str, str], list[HalfRef]] = defaultdict(list)
    for number, half in enumerate(halves):
        lane = (half.topic, half.message_group) if half.message_group else ("", str(number))
        lanes[lane].append(half)

    def run(lane: list[HalfRef]) -> list[tuple[str, EndOutcome]]:
        return [(h.message_id, end(client, h, commit=commit)) for h in lane]

    outcomes: dict[str, EndOutcome] = {}
    with ThreadPoolExecutor(max_workers=END_PARALLELISM) as pool:
        for done in pool.map(run, lanes.values()):
            outcomes.update(done)
    return outcomes


def committed(client: RocketMQClient, half: HalfRef, outcome: EndOutcome) -> bool:
    """True if a COMMIT of ``half`` that gave ``outcome`` left it visible."""
    if outcome in (EndOutcome.ENDED, EndOutcome.ALREADY_COMMITTED):
        return True
    if outcome is EndOutcome.ALREADY_ROLLED_BACK:
        return False
    for attempt in range(VISIBILITY_POLLS):  # UNKNOWN: ended before a broker restart
        if is_visible(client, half):
            return True
        if attempt + 1 < VISIBILITY_POLLS:
            time.sleep(VISIBILITY_POLL_S)
    return False


def rollback_quietly(client: RocketMQClient, halves: Sequence[HalfRef]) -> None:
    """Roll back halves best-effort: on failure the broker's check-back rolls them back."""
    if not halves:
        return
    try:
        end_all(client, halves, commit=False)
    except RocketMQError as exc:
        log.warning(
            "rolling back %d halves failed (%s); the broker's check-back will roll them back",
            len(halves),
            exc,
        )


# --------------------------------------------------------------------------- marker records


def _records(client: RocketMQClient, topic: str, batch_id: int) -> list[dict[str, Any]]:
    try:
        found = client.query_message(key=batch_key(batch_id), topic=topic, max_results=1000)
    except TopicNotFoundError:
        return []
    return [r for r in found if r["properties"].get("sparkBatchId") == str(batch_id)]


def _decode(record: dict[str, Any]) -> Any:
    raw = (
        base64.b64decode(record["body"])
        if record["body_encoding"] == "base64"
        else record["body"].encode("utf-8")
    )
    return json.loads(raw)


def _complete(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by the write they came from, keeping only writes with every chunk."""
    writes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        writes[record["properties"]["sparkRecord"]].append(record)
    return {
        rid: recs
        for rid, recs in writes.items()
        if len(recs) == int(recs[0]["properties"]["sparkChunks"])
    }


def _slots(records: list[dict[str, Any]]) -> dict[Slot, HalfRef]:
    halves: dict[Slot, HalfRef] = {}
    for record in records:
        for partition, seq, *ref in _decode(record)["halves"]:
            halves[(int(partition), int(seq))] = HalfRef.from_json(ref)
    return halves


def find_intent(client: RocketMQClient, topic: str, batch_id: int) -> Intent | None:
    """The batch's decision: its first complete intent, amended by later stand-ins.

    None when no complete intent was recorded for ``batch_id``.
    """
    writes = _complete(_records(client, topic, batch_id))

    def first_offset(recs: list[dict[str, Any]]) -> int:
        return min(int(r["queue_offset"]) for r in recs)

    intents = [w for w in writes.values() if w[0]["properties"]["sparkKind"] == "intent"]
    if not intents:
        return None
    chosen = min(intents, key=first_offset)
    attempt = chosen[0]["properties"]["sparkAttempt"]
    halves = _slots(chosen)
    mine = sorted(
        (w for w in writes.values() if w[0]["properties"]["sparkAttempt"] == attempt),
        key=first_offset,
    )
    for write in mine:
        if write[0]["properties"]["sparkKind"] == "amend":
            halves.update(_slots(write))
    done = any(w[0]["properties"]["sparkKind"] == "done" for w in mine)
    return Intent(attempt, halves, done)


def _write(
    client: RocketMQClient,
    topic: str,
    batch_id: int,
    attempt: str,
    kind: str,
    halves: dict[Slot, HalfRef],
) -> None:
    """One marker write of ``kind`` (intent, amend, done): all its chunks in one request,
    which the broker stores whole or not at all."""
    record = uuid.uuid4().hex
    items = [[p, s, *h.to_json()] for (p, s), h in sorted(halves.items())]
    parts = [
        items[i : i + INTENT_CHUNK_HALVES] for i in range(0, len(items), INTENT_CHUNK_HALVES)
    ] or [[]]
    props = {
        "sparkBatchId": str(batch_id),
        "sparkAttempt": attempt,
        "sparkKind": kind,
        "sparkRecord": record,
        "sparkChunks": str(len(parts)),
    }
    client.send_batch(
        topic,
        [
            OutgoingMessage(
                json.dumps({"batch": batch_id, "halves": part}, separators=(",", ":")).encode(
                    "utf-8"
                ),
                kind,
                (batch_key(batch_id),),
                props,
            )
            for part in parts
        ],
    )


def write_intent(
    client: RocketMQClient, topic: str, batch_id: int, halves: dict[Slot, HalfRef]
) -> str:
    """Record the decision for ``batch_id``; returns the intent's attempt id."""
    attempt = uuid.uuid4().hex
    _write(client, topic, batch_id, attempt, "intent", halves)
    return attempt


def require_admin_service(client: RocketMQClient) -> None:
    """UnsupportedError unless the broker offers our admin service: this protocol creates
    its marker topic and finds its records by key, and ``apache.rocketmq.v2`` has no RPC
    for either (a standard RocketMQ 5 endpoint, or a broker with ``--no-extensions``)."""
    try:
        client.health()
    except ServiceNotOfferedError as exc:
        raise UnsupportedError(
            f"option exactlyOnce on a stream: the exactly-once streaming sink needs the "
            f"broker's admin service rmq.admin.v1.Admin (CreateTopic, QueryMessage for its "
            f"batch records), and {client.endpoint} offers only the standard protocol; "
            f"use a batch write with exactlyOnce, or at-least-once streaming ({exc})"
        ) from None


def ensure_marker_topic(client: RocketMQClient, topic: str) -> None:
    """Create the one-queue marker topic unless it exists (idempotent)."""
    try:
        client.topic_status(topic)
    except TopicNotFoundError:
        client.create_topic(topic, queues=1)


# --------------------------------------------------------------------------- the protocol


def sink_name(messages: Sequence[WriterCommitMessage | None], producer_group: str | None) -> str:
    """The exactly-once sink's name: the producerGroup option, else the query id."""
    if producer_group:
        return producer_group
    ids = {m.query_id for m in messages if isinstance(m, TaskHalves) and m.query_id}
    if len(ids) != 1:
        raise RocketMQError(
            f"exactly-once commit needs one streaming query id, got {sorted(ids)}"
            "; set the producerGroup option"
        )
    return ids.pop()


def _too_old(messages: Sequence[WriterCommitMessage | None], timeout_ms: int) -> int:
    """Age in ms of the batch's oldest half if over half of ``timeout_ms``, else 0."""
    sent = [m.first_send_ms for m in messages if isinstance(m, TaskHalves) and m.first_send_ms]
    age_ms = time.time_ns() // 1_000_000 - min(sent) if sent else 0
    return age_ms if age_ms > timeout_ms // 2 else 0


def commit_stream_batch(
    client: RocketMQClient,
    messages: Sequence[WriterCommitMessage | None],
    batch_id: int,
    *,
    producer_group: str | None,
    timeout_ms: int,
) -> None:
    """Make exactly one attempt's halves of ``batch_id`` visible (module docstring).

    Idempotent: calling it again for the same batch (with any attempt's messages) never
    makes a row visible twice. Raises TransactionTimeoutError (batch rolled back) or
    TransactionLostError (decided halves gone with no replayed copy) and broker errors.
    """
    current = slots_of(messages)
    if not current:
        return  # nothing was sent: no row to deliver, nothing to decide
    topic = marker_topic(sink_name(messages, producer_group))
    ensure_marker_topic(client, topic)
    intent = find_intent(client, topic, batch_id)
    if intent is None:
        age_ms = _too_old(messages, timeout_ms)
        if age_ms:
            rollback_quietly(client, list(current.values()))
            raise TransactionTimeoutError(
                f"batch {batch_id}: its oldest half message is {age_ms} ms old, more than "
                f"half of transactionTimeoutMs={timeout_ms}; the batch was rolled back. "
                "Raise transactionTimeoutMs or make batches smaller"
            )
        attempt = write_intent(client, topic, batch_id, current)
        intent = Intent(attempt, current, False)
    _finish(client, topic, batch_id, intent, current)


def _finish(
    client: RocketMQClient, topic: str, batch_id: int, intent: Intent, current: dict[Slot, HalfRef]
) -> None:
    """Complete a decided batch: commit its halves (or stand-ins), drop everything else."""
    if intent.done:
        chosen = {h.message_id for h in intent.halves.values()}
        rollback_quietly(client, [h for h in current.values() if h.message_id not in chosen])
        log.info("batch %d was already committed; this attempt's halves rolled back", batch_id)
        return
    slots = sorted(intent.halves)
    outcomes = end_all(client, [intent.halves[s] for s in slots], commit=True)
    lost = [
        s
        for s in slots
        if not committed(client, intent.halves[s], outcomes[intent.halves[s].message_id])
    ]
    stand_ins, missing = _stand_ins(intent, current, lost)
    if stand_ins:  # recorded before they are committed, so a later replay keeps them
        _write(client, topic, batch_id, intent.attempt, "amend", stand_ins)
    chosen = {h.message_id for h in intent.halves.values()} | {
        h.message_id for h in stand_ins.values()
    }
    rollback_quietly(
        client, [current[s] for s in sorted(current) if current[s].message_id not in chosen]
    )
    replayed = [stand_ins[s] for s in sorted(stand_ins)]
    outcomes = end_all(client, replayed, commit=True)
    if any(not committed(client, h, outcomes[h.message_id]) for h in replayed):
        raise TransactionLostError(
            f"batch {batch_id}: replayed halves were rolled back "
            "before they could stand in for lost ones"
        )
    if missing:
        raise TransactionLostError(
            f"batch {batch_id}: {len(missing)} decided half messages (e.g. partition/row "
            f"{missing[0]}) were rolled back by the broker and this attempt has no identical "
            "replacement; raise transactionTimeoutMs"
        )
    _write(client, topic, batch_id, intent.attempt, "done", {})
    log.info(
        "batch %d committed: %d halves (%d replayed stand-ins)",
        batch_id,
        len(intent.halves),
        len(stand_ins),
    )


def _stand_ins(
    intent: Intent, current: dict[Slot, HalfRef], lost: list[Slot]
) -> tuple[dict[Slot, HalfRef], list[Slot]]:
    """This attempt's halves that replace decided halves the broker rolled back, and the
    lost slots this attempt has no identical (same topic and body CRC) half for."""
    stand_ins: dict[Slot, HalfRef] = {}
    missing: list[Slot] = []
    for slot in lost:
        replay = current.get(slot)
        original = intent.halves[slot]
        same_content = replay is not None and (replay.topic, replay.body_crc) == (
            original.topic,
            original.body_crc,
        )
        if replay is None or not same_content or replay.message_id == original.message_id:
            missing.append(slot)
        else:
            stand_ins[slot] = replay
    return stand_ins, missing


def abort_stream_batch(
    client: RocketMQClient,
    messages: Sequence[WriterCommitMessage | None],
    batch_id: int,
    *,
    producer_group: str | None,
) -> None:
    """Roll back the reported halves of ``batch_id`` that no intent record lists.

    Best-effort: halves it cannot reach are rolled back by the broker's check-back.
    """
    current = slots_of(messages)
    if not current:
        return
    keep: set[str] = set()
    try:
        intent = find_intent(client, marker_topic(sink_name(messages, producer_group)), batch_id)
    except RocketMQError as exc:
        log.warning(
            "abort of batch %d cannot read its markers (%s); leaving its halves to "
            "the broker's check-back",
            batch_id,
            exc,
        )
        return
    if intent is not None:
        keep = {h.message_id for h in intent.halves.values()}
    rollback_quietly(client, [h for h in current.values() if h.message_id not in keep])


def commit_job(client: RocketMQClient, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Batch write with exactlyOnce: make every reported half visible (all or nothing
    unless the driver dies mid-commit); TransactionLostError if one had expired."""
    halves = [current for _, current in sorted(slots_of(messages).items())]
    outcomes = end_all(client, halves, commit=True)
    lost = [h for h in halves if not committed(client, h, outcomes[h.message_id])]
    if lost:
        raise TransactionLostError(
            f"{len(lost)} half messages expired before the job "
            "committed; raise transactionTimeoutMs"
        )


def abort_job(client: RocketMQClient, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Batch write with exactlyOnce failed: roll back every reported half."""
    rollback_quietly(client, list(slots_of(messages).values()))
