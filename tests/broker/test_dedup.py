"""Idempotent sends in process (``broker/dedup.py``): a repeated message id is answered with
the original result and stored once — plain, column batches, held messages, after a restart —
while retry topics, internal re-puts and new ids are stored as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.topics import TopicConfig
from broker_core.errors import BusyError, ConfigError
from broker_core.message import Message
from broker_core.store.columns import encode_messages
from tests.broker.dedup_brokers import Make, brokers, stored

T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make(tmp_path: Path, clock: Clock) -> Iterator[Make]:
    """Start brokers over one store directory (one at a time); all stopped at the end."""
    with brokers(tmp_path, clock) as start:
        yield start


def msg(topic: str, uid: str, body: bytes = b"x", **props: str) -> Message:
    return Message(topic, body, queue_id=-1, properties={"UNIQ_KEY": uid, **props})


def columns(b: Broker, topic: str, uids: list[str]) -> tuple[list[int], list[int]]:
    """send_columns of one batch: (queue offsets, queue ids) per row."""
    batch = encode_messages(
        [Message(topic, b"c", queue_id=-1, properties={"UNIQ_KEY": u}) for u in uids],
        max_body_bytes=1024,
        max_properties_bytes=1024,
    )
    offsets = b.sending.send_columns(batch)
    return offsets.tolist(), batch.queue_ids.tolist()


def test_a_repeated_send_is_answered_with_the_original_and_stored_once(make: Make) -> None:
    b = make()
    first = b.sending.send([msg("t", "ID-1")])[0]
    for _ in range(3):
        b.sending.send([msg("t", "ID-2")])  # others in between move the round robin on
    again = b.sending.send([msg("t", "ID-1", b"retried")])[0]
    assert (again.message_id, again.queue_id, again.queue_offset) == (
        first.message_id,
        first.queue_id,
        first.queue_offset,
    )
    assert stored(b, "t") == ["ID-1", "ID-2"]
    assert b.sender.window.repeats == 3


def test_off_stores_every_repeat(make: Make) -> None:
    b = make(dedup_window_ms=0)
    b.sending.send([msg("t", "ID-1")])
    b.sending.send([msg("t", "ID-1")])
    assert stored(b, "t") == ["ID-1", "ID-1"]


def test_the_same_id_in_another_topic_is_another_message(make: Make) -> None:
    b = make()
    b.sending.send([msg("t", "ID-1")])
    b.sending.send([msg("u", "ID-1")])
    assert stored(b, "t") == stored(b, "u") == ["ID-1"]


def test_batches_are_checked_per_message(make: Make) -> None:
    b = make()
    first = b.sending.send([msg("t", "A"), msg("t", "B")])
    again = b.sending.send([msg("t", "B"), msg("t", "C"), msg("t", "C")])
    assert (again[0].queue_id, again[0].queue_offset) == (first[1].queue_id, first[1].queue_offset)
    assert (again[2].queue_id, again[2].queue_offset) == (again[1].queue_id, again[1].queue_offset)
    assert stored(b, "t") == ["A", "B", "C"]


def test_column_batches_answer_repeats_with_their_original_queue_and_offset(make: Make) -> None:
    b = make()
    offsets, queues = columns(b, "t", ["A", "B", "C", "D"])
    again_offsets, again_queues = columns(b, "t", ["C", "E", "A", "E"])
    assert (again_offsets[0], again_queues[0]) == (offsets[2], queues[2])
    assert (again_offsets[2], again_queues[2]) == (offsets[0], queues[0])
    assert (again_offsets[3], again_queues[3]) == (again_offsets[1], again_queues[1])
    assert stored(b, "t") == ["A", "B", "C", "D", "E"]
    whole_offsets, whole_queues = columns(b, "t", ["A", "B"])  # all repeats: nothing stored
    assert (whole_offsets, whole_queues) == (offsets[:2], queues[:2])
    assert stored(b, "t") == ["A", "B", "C", "D", "E"]


def test_a_repeated_transactional_send_gets_its_first_half(make: Make) -> None:
    b = make()
    props = {"TRAN_MSG": "true", "__transactionId__": "TX-1"}
    first = b.sending.send([msg("t", "H-1", **props)], producer_group="pg")[0]
    again = b.sending.send([msg("t", "H-1", **props)], producer_group="pg")[0]
    assert again == first and first.transaction_id == "TX-1" and first.half_offset >= 0
    b.sending.end_transaction("H-1", "TX-1", commit=True)
    assert stored(b, "t") == ["H-1"]  # one half, committed once
    assert b.sending.send([msg("t", "H-1", **props)], producer_group="pg")[0] == first


def test_a_repeated_delayed_send_is_held_once_and_delivered_once(make: Make, clock: Clock) -> None:
    b = make()
    first = b.sending.send([msg("t", "D-1", DELAY="1")])[0]
    assert b.sending.send([msg("t", "D-1", DELAY="1")])[0] == first
    clock.now += 1_000
    assert b.schedule.run_once(clock.now) == 1  # the broker's own re-put is not a repeat
    assert stored(b, "t") == ["D-1"]
    assert b.sending.send([msg("t", "D-1", DELAY="1")])[0] == first  # answered from the hold
    assert stored(b, "t") == ["D-1"]


def test_a_repeated_timed_send_keeps_its_recall_handle(make: Make, clock: Clock) -> None:
    b = make()
    due = str(clock.now + 60_000)
    first = b.sending.send([msg("t", "T-1", __STARTDELIVERTIME=due)])[0]
    again = b.sending.send([msg("t", "T-1", __STARTDELIVERTIME=due)])[0]
    assert again == first and first.recall_handle
    assert b.sending.recall(first.recall_handle)


def test_retry_topics_are_not_deduplicated(make: Make) -> None:
    """A 4.x consumer's send-back re-sends the same id for every round."""
    b = make()
    b.topics.ensure_retry_topic("g")
    for _ in range(2):
        b.sending.send([Message("%RETRY%g", b"r", queue_id=0, properties={"UNIQ_KEY": "R-1"})])
    assert stored(b, "%RETRY%g") == ["R-1", "R-1"]


def test_a_topic_switched_off_by_its_attribute_stores_every_repeat(make: Make) -> None:
    """Attribute ``dedup=false``: that topic's sends are neither checked nor held (also
    not by the rebuild); other topics' still are; switched on again, it is checked."""
    b = make()
    b.topics.create_or_update(TopicConfig("loose", 2, 2, attributes={"dedup": "false"}))
    for _ in range(2):
        b.sending.send([msg("loose", "L-1"), msg("t", "K-1")])
        columns(b, "loose", [f"L-{i:08d}" for i in range(20)])
    assert stored(b, "loose") == sorted(["L-1", *(f"L-{i:08d}" for i in range(20))] * 2)
    assert stored(b, "t") == ["K-1"]
    assert b.sender.window.size() == 1
    b = make()  # the rebuild skips the topic too
    assert b.sender.window.size() == 1
    b.sending.send([msg("loose", "L-2")])
    b.topics.create_or_update(TopicConfig("loose", 2, 2, attributes={"dedup": "true"}))
    b.sending.send([msg("loose", "L-3")])
    b.sending.send([msg("loose", "L-3")])
    assert stored(b, "loose").count("L-3") == 1
    with pytest.raises(ConfigError, match="dedup must be true or false, got 'no'"):
        TopicConfig("loose", attributes={"dedup": "no"})


def test_the_window_survives_a_restart(make: Make) -> None:
    b = make()
    first = b.sending.send([msg("t", "P-1")])[0]
    offsets, queues = columns(b, "t", ["P-2", "P-3"])
    half = b.sending.send([msg("t", "P-4", TRAN_MSG="true")], producer_group="pg")[0]
    b = make()  # stops the first, rebuilds from its commitlog
    assert b.sender.window.size() == 4
    assert b.sending.send([msg("t", "P-1")])[0] == first
    assert columns(b, "t", ["P-3", "P-2"]) == (offsets[::-1], queues[::-1])
    assert b.sending.send([msg("t", "P-4", TRAN_MSG="true")], producer_group="pg")[0] == half
    assert stored(b, "t") == ["P-1", "P-2", "P-3"]


def test_the_window_forgets_by_age(make: Make, clock: Clock) -> None:
    b = make(dedup_window_ms=10_000)
    b.sending.send([msg("t", "OLD")])
    clock.now += 20_000
    b.sending.send([msg("t", "NEW")])  # settles: the old generation expires
    b.sending.send([msg("t", "OLD")])
    assert stored(b, "t") == ["NEW", "OLD", "OLD"]
    b = make(dedup_window_ms=10_000)  # the rebuild keeps only the window
    assert b.sender.window.size() == 2


def test_the_window_is_bounded_by_count(make: Make) -> None:
    b = make(dedup_max_ids=32)
    columns(b, "t", [f"ID-{i}" for i in range(100)])
    assert b.sender.window.size() <= 32
    columns(b, "t", ["ID-0", "ID-99"])  # the oldest was forgotten, the newest not
    assert stored(b, "t").count("ID-0") == 2 and stored(b, "t").count("ID-99") == 1
    assert b.sender.window.memory_bytes() > 0


def test_concurrent_sends_of_one_id_store_it_once(make: Make) -> None:
    b = make()
    results = []
    barrier = threading.Barrier(4)

    def send() -> None:
        barrier.wait()
        for i in range(50):
            results.append(b.sending.send([msg("t", f"C-{i}")])[0])

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stored(b, "t") == sorted(f"C-{i}" for i in range(50))
    by_id = {(r.message_id, r.queue_id, r.queue_offset) for r in results}
    assert len(by_id) == 50


def test_a_failed_send_releases_its_ids(make: Make) -> None:
    b = make()
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do
        b.sending.send([msg("t", "F-1", DELAY="99")])
    b.sending.send([msg("t", "F-1")])
    assert stored(b, "t") == ["F-1"]


def test_a_repeat_waits_for_a_pending_first_send(make: Make) -> None:
    b = make()
    window = b.sender.window
    claim = window.claim(["t"], ["W-1"])  # as if another thread were storing W-1 now
    done = threading.Event()
    got: list[object] = []

    def repeat() -> None:
        got.append(b.sending.send([msg("t", "W-1")])[0])
        done.set()

    thread = threading.Thread(target=repeat)
    thread.start()
    deadline = time.monotonic() + 30
    while not window._waiters:  # parked behind the pending claim
        assert time.monotonic() < deadline and thread.is_alive(), "the repeat did not wait"
        time.sleep(0.001)
    assert not done.is_set()
    first = b.sender.sender.send([msg("t", "W-1")])[0]
    window.settle(claim, [first.physical_offset])
    thread.join()
    assert got == [first]
    assert stored(b, "t") == ["W-1"]


def test_a_pending_claim_that_never_settles_is_busy(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker_core.broker import dedup_window

    monkeypatch.setattr(dedup_window, "PENDING_WAIT_S", 0.05)
    b = make()
    window = b.sender.window
    window.claim(["t"], ["B-1"])
    with pytest.raises(BusyError):
        b.sending.send([msg("t", "B-1")])


def test_the_window_changes_live_and_is_rebuilt_from_the_log(make: Make) -> None:
    """``dedup_window_ms`` set live (UpdateBrokerConfig): 0 stores every repeat and frees
    the window; switched back on, the window is rebuilt from the log, so an id stored
    while it was off is answered from its unit."""
    from broker_core.broker import live_config

    b = make()
    first = b.sending.send([msg("t", "L-1")])[0]
    assert live_config.update(b, "dedup_window_ms", "0") == (120_000, 0)
    assert b.sender.window.size() == 0
    off = b.sending.send([msg("t", "L-2")])[0]
    b.sending.send([msg("t", "L-2")])  # off: stored again
    live_config.update(b, "dedup_window_ms", 120_000)
    assert b.sender.window.size() == 2  # L-1 and the first L-2, from the log
    assert b.sending.send([msg("t", "L-1")])[0] == first
    assert b.sending.send([msg("t", "L-2")])[0] == off
    assert stored(b, "t") == ["L-1", "L-2", "L-2"]
