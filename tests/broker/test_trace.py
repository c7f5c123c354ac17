"""The broker's own trace records: written to RMQ_SYS_TRACE_TOPIC, found by message id."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from itertools import groupby
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.pull import PullRequest
from broker_core.broker.trace import appends
from broker_core.config import BrokerConfig
from broker_core.message import Message
from broker_core.protocol.bulk_send import decode_request, encode_request
from broker_core.protocol.filters import MessageFilter
from broker_core.protocol.trace import TRACE_TOPIC, TraceRecord, decode
from broker_core.protocol.trace_lookup import Found, lookup
from broker_core.protocol.trace_runs import bucket_key, pull_key, run_ids
from broker_core.protocol.trace_timeline import timeline
from broker_core.server.convert_bulk import Limits, to_column_batch
from tests.broker.test_broker import Clock
from tests.store.conftest import small_config


def _broker(tmp_path: Path, clock: Clock, **trace: str) -> Broker:
    config = BrokerConfig(default_queue_nums=2, transaction_check_timeout_ms=1_000, **trace)  # type: ignore[arg-type]
    b = Broker(config, small_config(tmp_path / "store"), clock_ms=clock)
    b.start()
    return b


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def traced(tmp_path: Path, clock: Clock) -> Iterator[Broker]:
    b = _broker(tmp_path, clock, trace_broker="all")
    yield b
    b.stop()


def records_of(broker: Broker, msg_id: str) -> list[TraceRecord]:
    """``msg_id``'s records, found as ``rmq message trace`` finds them (by its id, its
    bucket and the pull runs covering where it was stored)."""
    broker.trace.flush()
    broker.store.wait_dispatched()

    def query(key: str) -> list[Found]:
        found = broker.query_by_key(TRACE_TOPIC, key, max_results=1000)
        return [(m.queue_offset, decode(m.body.decode()), "", 0) for m in found]

    return [r for recs, _h, _b in lookup(msg_id, query) for r in recs if r.msg_id == msg_id]


def test_pop_life_is_traced_in_order(traced: Broker, clock: Clock) -> None:
    [sent] = traced.sending.send([Message("jobs", b"j1", queue_id=-1)])
    traced.store.wait_dispatched()
    [first] = traced.consuming.receive(
        "workers", "jobs", max_count=1, invisible_ms=10_000, client_id="c1"
    )
    clock.now += 5
    traced.consuming.change_invisible_duration("workers", "jobs", first.receipt_handle, 1_000)
    clock.now += 2_000
    traced.pop.run_revive(clock.now)
    traced.store.wait_dispatched()
    [again] = traced.consuming.receive(
        "workers", "jobs", max_count=1, invisible_ms=10_000, client_id="c1"
    )
    clock.now += 7
    traced.consuming.ack("workers", "jobs", again.receipt_handle, client_id="c1")
    events = timeline(sent.message_id, [(records_of(traced, sent.message_id), "", 0)])
    assert [e["type"] for e in events] == [
        "Stored",
        "Delivered",
        "Nack",
        "Retry",
        "Delivered",
        "Ack",
    ]
    delivered = [e for e in events if e["type"] == "Delivered"]
    assert [d["attempt"] for d in delivered] == [1, 2]
    assert {d["client_id"] for d in delivered} == {"c1"}
    assert events[0]["queue_id"] == sent.queue_id and events[0]["offset"] == sent.queue_offset
    assert events[-1]["cost_ms"] == 7  # ack − this delivery's pop time
    assert [e["time_ms"] for e in events] == sorted(e["time_ms"] for e in events)


def test_dead_letter_is_traced(traced: Broker, clock: Clock) -> None:
    [sent] = traced.sending.send([Message("jobs", b"j1", queue_id=-1)])
    traced.store.wait_dispatched()
    [got] = traced.consuming.receive("workers", "jobs", max_count=1, invisible_ms=10_000)
    traced.consuming.forward_to_dead_letter("workers", "jobs", got.receipt_handle)
    types = [r.type for r in records_of(traced, sent.message_id)]
    assert types == ["Stored", "Delivered", "DLQ"]


def test_transactions_are_traced(traced: Broker) -> None:
    props = {"TRAN_MSG": "true"}
    a = traced.sending.send(
        [Message("pay", b"a", queue_id=-1, properties=dict(props))], producer_group="pg"
    )[0]
    b = traced.sending.send(
        [Message("pay", b"b", queue_id=-1, properties=dict(props))], producer_group="pg"
    )[0]
    traced.sending.end_transaction(a.message_id, a.transaction_id, commit=True)
    traced.sending.end_transaction(b.message_id, b.transaction_id, commit=False, from_check=True)
    assert [(r.type, r.status) for r in records_of(traced, a.message_id)] == [
        ("Stored", "held: half for pay"),
        ("Stored", ""),
        ("Commit", ""),
    ]
    held, rolled = records_of(traced, b.message_id)
    assert (held.type, rolled.type, rolled.status) == ("Stored", "Rollback", "check")


def test_selection_by_topic_and_group(tmp_path: Path, clock: Clock) -> None:
    b = _broker(tmp_path, clock, trace_broker="all", trace_topics="jobs", trace_groups="audit")
    try:
        [job, other] = b.sending.send(
            [Message("jobs", b"1", queue_id=0), Message("misc", b"2", queue_id=0)]
        )
        b.store.wait_dispatched()
        b.consuming.receive("workers", "jobs", max_count=1, invisible_ms=10_000)
        b.consuming.receive("audit", "jobs", max_count=1, invisible_ms=10_000)
        assert [(r.type, r.group) for r in records_of(b, job.message_id)] == [
            ("Stored", ""),
            ("Delivered", "audit"),
        ]
        assert records_of(b, other.message_id) == []
    finally:
        b.stop()


def test_off_writes_nothing_and_installs_nothing(tmp_path: Path, clock: Clock) -> None:
    b = _broker(tmp_path, clock)
    try:
        assert not b.trace.on
        assert b.store.dispatcher._observers == []
        b.sending.send([Message("jobs", b"1", queue_id=0)])
        assert b.topics.get(TRACE_TOPIC) is None
        assert b.trace.flush() == 0
    finally:
        b.stop()


def test_trace_topic_enable_creates_the_topic(tmp_path: Path, clock: Clock) -> None:
    b = _broker(tmp_path, clock, trace_topic_enable=True)  # type: ignore[arg-type]
    try:
        config = b.topics.get(TRACE_TOPIC)
        assert config is not None and config.write_queue_nums == 1
        assert not b.trace.on
    finally:
        b.stop()


@pytest.mark.parametrize("width", ["one", "mixed"])
def test_sampling_keeps_whole_timelines_and_buckets(
    tmp_path: Path, clock: Clock, width: str
) -> None:
    """A ratio traces the ids of a share of buckets (an id without its last two
    characters), every event of them: the same choice whether the append's ids are all
    of one width (its ids joined and sampled by bucket when the hook sees it) or not
    (sampled row by row on the trace thread)."""
    b = _broker(tmp_path, clock, trace_broker="0.5")
    try:
        ids = [f"S{i // 4:06d}{i % 4:02d}" for i in range(200)]  # 50 buckets of 4 ids
        if width == "mixed":
            ids = [i if n % 3 else i + "x" for n, i in enumerate(ids)]
        sent = b.sending.send([Message("jobs", b"j", 0, {"UNIQ_KEY": i}) for i in ids])
        b.store.wait_dispatched()
        b.consuming.receive("g", "jobs", max_count=32, invisible_ms=10_000)
        traced = {s.message_id for s in sent if records_of(b, s.message_id)}
        assert traced == {s.message_id for s in sent if b.trace.selection.sampled(s.message_id)}
        buckets, every = {i[:-2] for i in traced}, {i[:-2] for i in ids}
        assert 0.2 < len(buckets) / len(every) < 0.8  # about half, by a CRC: fixed for these ids
        assert traced == {i for i in ids if i[:-2] in buckets}  # whole buckets
        delivered = {r.msg_id for i in ids[:32] for r in records_of(b, i) if r.type == "Delivered"}
        assert delivered == traced & set(ids[:32])
    finally:
        b.stop()


def test_offset_pulls_are_traced_decoded_raw_and_parked(traced: Broker) -> None:
    sent = traced.sending.send(
        [Message("feed", b"a", queue_id=0), Message("feed", b"b", queue_id=0)]
    )
    traced.store.wait_dispatched()
    traced.pulling.pull("readers", PullRequest("feed", 0, 0, 10))
    traced.pulling.pull("bulk", PullRequest("feed", 0, 1, 10, raw=True))
    answered = threading.Event()
    traced.pulling.pull_async(
        "later", PullRequest("feed", 0, 2, 10), lambda _r: answered.set(), timeout_ms=10_000
    )
    [late] = traced.sending.send([Message("feed", b"c", queue_id=0)])
    assert answered.wait(10)
    pulls = [
        (r.group, r.offset, r.status)
        for r in records_of(traced, sent[1].message_id)
        if r.type == "Delivered"
    ]
    assert pulls == [("readers", 1, "pull"), ("bulk", 1, "pull")]
    [parked] = [r for r in records_of(traced, late.message_id) if r.type == "Delivered"]
    assert (parked.group, parked.offset, parked.attempt) == ("later", 2, 1)


def test_delay_level_and_timer_messages_show_held_and_timer(traced: Broker, clock: Clock) -> None:
    [delayed] = traced.sending.send(
        [Message("orders", b"later", queue_id=0, properties={"DELAY": "2"})]
    )
    due = {"__STARTDELIVERTIME": str(clock.now + 3_000)}
    [timed] = traced.sending.send([Message("orders", b"timed", queue_id=0, properties=due)])
    traced.store.wait_dispatched()
    traced.timer.run_once(clock.now)
    clock.now += 5_000
    traced.store.wait_dispatched()
    traced.schedule.run_once(clock.now)
    traced.timer.run_once(clock.now)
    held, stored, fired = records_of(traced, delayed.message_id)
    assert (held.type, held.status) == ("Stored", "held: delay level=2 for orders")
    assert (fired.type, fired.topic, fired.status) == ("Timer", "orders", "delay level=2")
    assert (stored.type, stored.topic, stored.offset) == ("Stored", "orders", fired.offset)
    types = [(r.type, r.status) for r in records_of(traced, timed.message_id)]
    assert types == [("Stored", "held: timer for orders"), ("Stored", ""), ("Timer", "timer")]


def test_an_append_spread_over_queues_is_one_record_of_blocks(traced: Broker) -> None:
    """Rows spread over the topic's queues in blocks are one run record (``blocks=``),
    from which each message's own queue, offset and cost come back."""
    traced.sending.send([Message("spread", b"w", queue_id=1)])  # queue 1 starts at offset 1
    ids = [f"SPREAD{i:04d}" for i in range(7)]
    sent = traced.sending.send(
        [Message("spread", b"x", -1, {"UNIQ_KEY": i}, born_timestamp_ms=500) for i in ids]
    )
    traced.store.wait_dispatched()
    assert {m.queue_id for m in sent} == {0, 1}
    for m in sent:
        [stored] = [r for r in records_of(traced, m.message_id) if r.type == "Stored"]
        assert (stored.queue_id, stored.offset) == (m.queue_id, m.queue_offset), m
        assert (stored.cost_ms, stored.status) == (stored.time_ms - 500, "")
    found = traced.query_by_key(TRACE_TOPIC, bucket_key(ids[0]), max_results=100)
    [run] = [r for m in found for r in decode(m.body.decode()) if r.msg_id.startswith("SPREAD")]
    assert run.msg_id.startswith("SPREAD00,")  # the prefix they share, written once
    assert run_ids(run) == [m.message_id for m in sent]
    blocks = [
        f"{q}:{group[0].queue_offset}:{len(group)}"
        for q, group in ((q, list(g)) for q, g in groupby(sent, key=lambda m: m.queue_id))
    ]
    assert len(blocks) == 2 and run.status == "run prefixed blocks=" + ",".join(blocks)


@pytest.mark.parametrize("comma", [False, True])
def test_a_bulk_frames_id_properties_are_read_for_its_records(traced: Broker, comma: bool) -> None:
    """A SendBulk frame of ids alone, of one length, hands its decoded properties to the trace
    (no per-row join on the send path): one run record over the topic's queues, or, where
    an id holds the run separator, a record per message; each message's queue and offset
    come back either way."""
    ids = [f"BULK{i:04d}" + ("," if comma and i == 3 else "_") for i in range(9)]
    frame = encode_request(
        "bulk", [b"x"] * len(ids), [f"UNIQ_KEY\x01{i}\x02".encode() for i in ids],
        born_timestamp_ms=700, born_host="10.0.0.1",
    )  # fmt: skip
    batch = to_column_batch(
        decode_request(frame), limits=Limits(1024, 1024), peer=("10.0.0.2", 1), now_ms=800
    )
    assert batch.id_text is not None
    sent = traced.sending.send_batch(batch)
    traced.store.wait_dispatched()
    placed = list(zip(sent.queue_ids.tolist(), sent.queue_offsets.tolist(), strict=True))
    assert len({q for q, _ in placed}) == 2
    for msg_id, where in zip(ids, placed, strict=True):
        [stored] = [r for r in records_of(traced, msg_id) if r.type == "Stored"]
        assert (stored.queue_id, stored.offset) == where, msg_id
        assert stored.cost_ms == stored.time_ms - 700
    found = traced.query_by_key(TRACE_TOPIC, bucket_key(ids[0]), max_results=100)
    texts = [r for m in found for r in decode(m.body.decode()) if r.topic == "bulk"]
    assert len(texts) > 2 if comma else len(texts) == 1  # with a comma: records per row


def test_an_append_and_a_raw_pull_are_one_record_each(
    traced: Broker,
) -> None:
    tags = ["A", "A", "B", "A", "A", "A"]
    born = [1_000 + 7 * i for i in range(len(tags))]  # each its own store cost
    sent = traced.sending.send(
        [
            Message("run", b"x", queue_id=0, properties={"TAGS": t}, born_timestamp_ms=b)
            for t, b in zip(tags, born, strict=True)
        ]
    )
    traced.store.wait_dispatched()
    for m, b in zip(sent, born, strict=True):  # the append's one run record, per message
        [stored] = [r for r in records_of(traced, m.message_id) if r.type == "Stored"]
        assert (stored.queue_id, stored.offset) == (0, m.queue_offset)
        assert (stored.cost_ms, stored.status) == (stored.time_ms - b, "")
    found = traced.query_by_key(TRACE_TOPIC, bucket_key(sent[0].message_id), max_results=100)
    runs = [r for m in found for r in decode(m.body.decode()) if r.topic == "run"]
    assert [(r.type, run_ids(r), r.offset) for r in runs] == [
        ("Stored", [m.message_id for m in sent], 0)
    ]
    traced.pulling.pull("bulk", PullRequest("run", 0, 1, 3, raw=True))  # offsets 1..3: one run
    only_a = MessageFilter("TAG", "A")  # offsets 3..5 and 0, 1 but not 2: no run
    traced.pulling.pull("tagged", PullRequest("run", 0, 0, 10, filter=only_a, raw=True))
    for m, tag in zip(sent, tags, strict=True):
        pulls = sorted(
            (r.group, r.offset, r.status)
            for r in records_of(traced, m.message_id)
            if r.type == "Delivered"
        )
        run = [("bulk", m.queue_offset, "pull")] if 1 <= m.queue_offset <= 3 else []
        tagged = [("tagged", m.queue_offset, "pull")] if tag == "A" else []
        assert pulls == sorted(run + tagged), m.queue_offset
    runs = [
        (r.group, r.msg_id, r.offset, r.status)
        for msg in traced.query_by_key(TRACE_TOPIC, pull_key("run", 0, 1), max_results=100)
        for r in decode(msg.body.decode())
        if r.type == "Delivered" and not r.msg_id
    ]
    assert runs == [("bulk", "", 1, "pull 3")]  # the filtered pull wrote one per message


def test_a_failing_hook_fails_no_send_and_loses_no_record(
    traced: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored hook runs on the send path, after the write: if taking the append fails,
    the send still succeeds and the trace thread builds its records row by row."""

    def broken(*_args: object) -> None:
        raise ValueError("taken broke")

    monkeypatch.setattr(appends, "taken", broken)
    [sent] = traced.sending.send([Message("hooked", b"x", queue_id=0)])
    traced.store.wait_dispatched()
    [stored] = [r for r in records_of(traced, sent.message_id) if r.type == "Stored"]
    assert (stored.topic, stored.offset) == ("hooked", sent.queue_offset)
