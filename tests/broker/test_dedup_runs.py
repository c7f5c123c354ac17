"""The dedup window's run lane (``broker/dedup_runs.py``): batches of one client's rising
ids held as runs, checked against the dict lane both ways, in flight, after a restart and
at the bounds — in a real broker over a temporary store."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.dedup_runs import (
    MIN_ROWS,
    Runs,
    Span,
    id_number,
    span_of,
    span_of_text,
)
from broker_core.client.bulk import IdBlock
from broker_core.client.message_ids import ID_BLOCKS
from broker_core.message import Message
from broker_core.store.columns import encode_messages
from tests.broker.dedup_brokers import Make, brokers, stored

PREFIX = "01A1B2C3D4E5F60102"  # version, host and pid, as RocketMQ 5's ids (ours too)


def uid(number: int, prefix: str = PREFIX) -> str:
    return f"{prefix}{number:016X}"


def client_ids(count: int) -> list[str]:
    """A batch's ids as our client numbers them (``ID_BLOCKS``: one prefix a batch)."""
    prefix, first = ID_BLOCKS.reserve(count)
    return IdBlock(prefix.decode(), first, count).strings()


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    with brokers(tmp_path) as start:
        yield start


def columns(b: Broker, uids: list[str], topic: str = "t") -> list[tuple[int, int]]:
    """send_columns of one batch: (queue id, queue offset) per row."""
    batch = encode_messages(
        [Message(topic, b"c", queue_id=-1, properties={"UNIQ_KEY": u}) for u in uids],
        max_body_bytes=1024,
        max_properties_bytes=1024,
    )
    offsets = b.sending.send_columns(batch)
    return list(zip(batch.queue_ids.tolist(), offsets.tolist(), strict=True))


def single(b: Broker, u: str, topic: str = "t") -> tuple[int, int]:
    r = b.sending.send([Message(topic, b"s", queue_id=-1, properties={"UNIQ_KEY": u})])[0]
    return r.queue_id, r.queue_offset


# ---- spans and runs alone -----------------------------------------------------------------


def test_a_clients_batch_is_a_span_and_each_id_reads_as_its_number() -> None:
    ids = client_ids(64)
    span = span_of("t", ids)
    assert span is not None and span.key == ("t", ids[0][:-8])
    assert span.numbers.tolist() == [id_number("t", u)[1] for u in ids]  # type: ignore[index]
    java4 = [f"0A000001{1234:04X}6D2A9C1F{7000 + i:08X}{i:04X}" for i in range(20)]
    assert span_of("t", java4) is not None  # 4.x: ip, pid, loader, time, counter


@pytest.mark.parametrize(
    "ids",
    [
        [uid(i) for i in range(MIN_ROWS - 1)],  # too few
        [uid(i) for i in range(20)][::-1],  # falling
        [uid(i) for i in range(19)] + [uid(18)],  # a repeat inside
        [uid(i) for i in range(19)] + [uid(19, "01A1B2C3D4E5F60103")],  # another client
        [uid(i) for i in range(19)] + [uid(19) + "0"],  # another length
        [f"ID-{i:020d}é" for i in range(20)],  # not ASCII
        [f"{i:07X}" for i in range(20)],  # shorter than the tail
    ],
)
def test_other_batches_are_no_span(ids: list[str]) -> None:
    assert span_of("t", ids) is None


def test_a_bulk_frames_ids_read_as_the_same_span() -> None:
    ids = client_ids(40)
    text = "".join(f"UNIQ_KEY\x01{u}\x02" for u in ids)
    by_text, by_ids = span_of_text("t", text, len(ids)), span_of("t", ids)
    assert by_text is not None and by_ids is not None and by_text.key == by_ids.key
    assert by_text.numbers.tolist() == by_ids.numbers.tolist()


def test_ids_of_other_shapes_have_no_number() -> None:
    assert id_number("t", "ID-1") is None  # shorter than the tail
    assert id_number("t", f"é{1:016X}") is None  # not ASCII
    assert id_number("t", uid(0xABC)) == (("t", PREFIX + "00000000"), int.from_bytes(b"00000ABC"))
    assert id_number("t", "ID-~~~~~~~~") == (("t", "ID-"), int.from_bytes(b"~" * 8))


def test_runs_find_what_they_hold_and_refuse_overlaps() -> None:
    runs = Runs()
    key = ("t", PREFIX)
    first = runs.add(Span.of(key, np.arange(100, 200, 2, dtype=np.uint64)), np.arange(50))
    later = runs.add(Span.of(key, np.arange(300, 320, dtype=np.uint64)), np.arange(1000, 1020))
    assert first is not None and later is not None and runs.ids == 70
    assert runs.add(Span.of(key, np.array([150, 400], np.uint64)), np.arange(2)) is None
    assert runs.find_one(key, 102) == 1 and runs.find_one(key, 103) is None
    assert runs.find_one(key, 319) == 1019 and runs.find_one(("u", PREFIX), 102) is None
    found = runs.find(Span.of(key, np.array([98, 100, 199, 250, 301], np.uint64)))
    assert found is not None and found.tolist() == [-1, 0, -1, -1, 1001]
    assert runs.find(Span.of(key, np.array([201, 299], np.uint64))) is None
    runs.drop([first])
    assert runs.find_one(key, 102) is None and runs.ids == 20
    runs.drop([later])
    assert runs.find(Span.of(key, np.array([301], np.uint64))) is None and runs.runs == 0


def test_runs_dropped_out_of_their_order_leave_the_others_held() -> None:
    runs = Runs()
    key = ("t", PREFIX)
    held = [
        runs.add(Span.of(key, np.arange(lo, lo + 10, dtype=np.uint64)), np.arange(lo, lo + 10))
        for lo in (0, 100, 200, 300)
    ]
    assert all(held)
    runs.drop([held[2], held[1]])  # not the first: the slow path
    assert runs.find_one(key, 105) is None and runs.find_one(key, 205) is None
    assert runs.find_one(key, 5) == 5 and runs.find_one(key, 305) == 305 and runs.ids == 20
    runs.drop([held[0], held[3]])
    assert runs.runs == 0 and not list(runs.keys())
    with pytest.raises(AssertionError):
        runs.drop([held[0]])


def test_runs_agree_with_a_set_over_random_spans() -> None:
    """Random spans of one key, some overlapping (held elsewhere, as the window does):
    every number held is found at its offset, every other not."""
    rng = random.Random(7)
    runs, truth = Runs(), {}
    key = ("t", "")
    for _ in range(300):
        lo = rng.randrange(0, 100_000)
        numbers = sorted(rng.sample(range(lo, lo + 400), rng.randrange(1, 60)))
        offsets = np.array([rng.randrange(1 << 40) for _ in numbers], np.int64)
        if runs.add(Span.of(key, np.array(numbers, np.uint64)), offsets) is not None:
            truth.update(zip(numbers, offsets.tolist(), strict=True))
    probe = np.array(sorted(rng.sample(range(0, 100_400), 5000)), np.uint64)
    found = runs.find(Span.of(key, probe))
    assert found is not None
    assert found.tolist() == [truth.get(n, -1) for n in probe.tolist()]
    assert all(runs.find_one(key, n) == truth.get(n) for n in probe.tolist()[:500])


# ---- in a broker ----------------------------------------------------------------------------


def test_a_retried_batch_is_answered_from_its_run_and_stored_once(make: Make) -> None:
    b = make()
    ids = [uid(i) for i in range(100)]
    first = columns(b, ids)
    assert b.sender.window._held.runs.ids == 100  # held as a run, not in the dict
    assert columns(b, ids) == first
    part = columns(b, ids[50:] + [uid(i) for i in range(100, 120)])  # half repeats
    assert part[:50] == first[50:]
    assert stored(b, "t") == sorted(ids + [uid(i) for i in range(100, 120)])


def test_a_single_repeat_of_a_batched_id_and_a_batch_holding_a_single(make: Make) -> None:
    b = make()
    first = columns(b, [uid(i) for i in range(32)])
    assert single(b, uid(7)) == first[7]  # a dict claim finds it in the runs
    alone = single(b, uid(40))
    again = columns(b, [uid(i) for i in range(32, 64)])  # a run claim finds it in the dict
    assert again[8] == alone
    assert stored(b, "t") == sorted(uid(i) for i in range(64))


def test_interleaved_batches_of_one_client_are_held_and_answered(make: Make) -> None:
    """Two threads of one client number their batches from one counter: the spans
    overlap, the second is held in the dict, and every repeat is still found."""
    b = make()
    evens = [uid(i) for i in range(0, 64, 2)]
    odds = [uid(i) for i in range(1, 64, 2)]
    first = columns(b, evens) + columns(b, odds)
    window = b.sender.window
    assert window._held.runs.ids == 32 and len(window._held.ids) == 32
    mixed = [uid(i) for i in range(64)]
    answers = columns(b, mixed)
    by_id = dict(zip(evens + odds, first, strict=True))
    assert answers == [by_id[u] for u in mixed]
    assert stored(b, "t") == sorted(mixed)


def test_a_batch_in_flight_holds_back_its_repeats(make: Make) -> None:
    b = make()
    window = b.sender.window
    ids = [uid(i) for i in range(32)]
    claim = window.claim_columns(
        "t", [[u] for u in ids]
    )  # as if another thread were storing them now
    assert claim is not None and claim.span is not None
    got: dict[str, object] = {}

    def repeat_single() -> None:
        got["single"] = single(b, uid(3))

    def repeat_batch() -> None:
        got["batch"] = columns(b, ids[16:])

    threads = [threading.Thread(target=repeat_single), threading.Thread(target=repeat_batch)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while window._waiters < 2:  # both parked behind the pending claim
        assert time.monotonic() < deadline, "the repeats did not wait"
        time.sleep(0.001)
    batch = encode_messages(
        [Message("t", b"c", queue_id=-1, properties={"UNIQ_KEY": u}) for u in ids],
        max_body_bytes=1024,
        max_properties_bytes=1024,
    )
    offsets = b.sender.sender.send_columns(batch)
    window.settle(claim, batch.physical_offsets.astype(np.int64))
    for t in threads:
        t.join()
    queues = batch.queue_ids.tolist()
    assert got["single"] == (queues[3], int(offsets[3]))
    assert got["batch"] == list(zip(queues[16:], offsets[16:].tolist(), strict=True))
    assert stored(b, "t") == sorted(ids)


def test_runs_survive_a_restart(make: Make) -> None:
    b = make()
    ids = client_ids(200)
    first = columns(b, ids[:100]) + columns(b, ids[100:])
    alone = single(b, "ID-1")
    b = make()
    window = b.sender.window
    assert window.size() == 201 and window._held.runs.ids == 200  # gathered back into runs
    assert columns(b, ids[50:150]) == first[50:150]
    assert single(b, ids[199]) == first[199] and single(b, "ID-1") == alone
    assert stored(b, "t") == sorted([*ids, "ID-1"])


def test_runs_are_forgotten_at_the_count_bound(make: Make) -> None:
    b = make(dedup_max_ids=64)
    for start in range(0, 256, 32):
        columns(b, [uid(i) for i in range(start, start + 32)])
    window = b.sender.window
    assert window.size() <= 64 and window._held.runs.ids == window.size()
    columns(b, [uid(i) for i in range(224, 256)])  # the newest: held, not stored again
    assert stored(b, "t").count(uid(224)) == 1
    columns(b, [uid(i) for i in range(16)])  # the oldest: forgotten, stored again
    assert stored(b, "t").count(uid(0)) == 2


def test_batches_stored_out_of_their_ids_order_are_rebuilt_as_runs(make: Make) -> None:
    """Sends in flight together are stored in any order: a rebuild gathers consecutive
    units into runs without letting one jump over another (it would overlap it)."""
    b = make()
    batches = [[uid(i) for i in range(start, start + 32)] for start in range(0, 256, 32)]
    order = [1, 0, 3, 2, 5, 4, 7, 6]
    first = {}
    for at in order:
        first.update(zip(batches[at], columns(b, batches[at]), strict=True))
    b = make()
    window = b.sender.window
    assert window._held.runs.ids == 256 and not window._held.ids and not window._held.dict_spans
    every = [u for batch in batches for u in batch]
    assert columns(b, every[16:80]) == [first[u] for u in every[16:80]]
    assert stored(b, "t") == sorted(every)
