"""Commitlog damage: after a crash recovery cuts at the first bad unit and keeps the valid
prefix; below the checkpoint of a clean stop a damaged unit is refused when read, and
consumers get past it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client import RocketMQClient
from broker_core.protocol import unit as layout
from tests.chaos.corrupt.conftest import (
    CONFIG,
    GROUP,
    PAGE_BYTES,
    QUEUES,
    TOPIC,
    Golden,
    Restarted,
    assert_appends_continue,
    assert_keys,
    assert_never_garbage,
    stop_or_explain,
)
from tests.server.conftest import start_broker


def damage_commitlog(golden: Golden, store: Path, kind: str, rng: random.Random) -> int:
    """Damage the copy's commitlog; returns the index of the first unit damaged."""
    units = golden.units
    if kind in ("torn-tail", "garbage-tail"):
        victim = rng.randrange(len(units) - 10, len(units))
    else:
        victim = rng.randrange(len(units) // 4, len(units) - 1)
    unit = units[victim]
    seg, local = golden.segment_of(store, unit.phys)
    data = bytearray(seg.read_bytes())
    at = local + rng.randrange(unit.size)
    if kind == "torn-tail":  # the page cache never reached the disk from here on
        data[at:] = bytes(len(data) - at)
    elif kind == "garbage-tail":
        data[at:] = rng.randbytes(len(data) - at)
    elif kind == "zero-page":
        page = at - at % PAGE_BYTES
        data[page : page + PAGE_BYTES] = bytes(PAGE_BYTES)
        victim = next(i for i, u in enumerate(units) if u.end > page + seg_base(seg))
    elif kind == "bit-flip":
        data[at] ^= 1 << rng.randrange(8)
    elif kind == "zero-header":  # size and magic gone: looks like the end of the data
        data[local : local + 8] = bytes(8)
    seg.write_bytes(bytes(data))
    return victim


def seg_base(seg: Path) -> int:
    return int(seg.name)


def check_cut_at(golden: Golden, victim: int, run: Restarted) -> None:
    units = golden.units
    kept, lost = units[:victim], units[victim:]
    assert_never_garbage(golden, run.served)
    assert set(run.served.bodies) == {u.message_id for u in kept}
    assert not run.served.refused
    for qid in range(QUEUES):
        assert run.served.bounds[qid][1] == sum(u.queue_id == qid for u in kept)
    assert "abnormal shutdown: True" in run.opened
    assert f"commitlog truncated at {units[victim].phys}, dropped " in run.opened, run.opened
    assert_keys(run.proc, kept, found=True)
    assert_keys(run.proc, lost, found=False)
    assert_appends_continue(run.proc, run.served)


CRASH_KINDS = ["torn-tail", "garbage-tail", "zero-page", "bit-flip", "zero-header"]


@pytest.mark.parametrize("kind", ["torn-tail", "zero-page", "bit-flip"])
def test_crash_then_damaged_commitlog_keeps_the_valid_prefix(
    crashed: Golden, restart: Any, tmp_path: Path, kind: str
) -> None:
    store = crashed.copy(tmp_path)
    victim = damage_commitlog(crashed, store, kind, random.Random(kind))
    check_cut_at(crashed, victim, restart(store))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kind", CRASH_KINDS)
def test_crash_then_damaged_commitlog_many_points(
    crashed: Golden, restart: Any, tmp_path: Path, kind: str, seed: int
) -> None:
    store = crashed.copy(tmp_path)
    victim = damage_commitlog(crashed, store, kind, random.Random(f"{kind}-{seed}"))
    check_cut_at(crashed, victim, restart(store))


def test_damage_below_the_checkpoint_found_by_recovery_cuts_there(
    stopped: Golden, restart: Any, tmp_path: Path
) -> None:
    """Bit rot in the last unit of a cleanly stopped store: recovery's check of each queue's
    last unit finds it. The broker used to refuse to start (the queue rebuild raised);
    now the log is cut there like a torn tail."""
    store = stopped.copy(tmp_path)
    last = stopped.units[-1]
    seg, local = stopped.segment_of(store, last.phys)
    data = bytearray(seg.read_bytes())
    data[local + layout.HEADER_SIZE] ^= 0x40  # the first body byte
    seg.write_bytes(bytes(data))
    run = restart(store)
    assert_never_garbage(stopped, run.served)
    assert set(run.served.bodies) == {u.message_id for u in stopped.units[:-1]}
    assert "abnormal shutdown: False" in run.opened
    assert f"commitlog truncated at {last.phys}" in run.opened and "body CRC" in run.opened
    assert_appends_continue(run.proc, run.served)


# ---- damage below the checkpoint of a clean stop: refused when read -------------------------


def test_zeroed_page_in_a_cleanly_stopped_store_is_refused_when_read(
    stopped: Golden, restart: Any, tmp_path: Path
) -> None:
    store = stopped.copy(tmp_path)
    middle = stopped.units[len(stopped.units) // 2]
    seg, local = stopped.segment_of(store, middle.phys)
    page = local + PAGE_BYTES - local % PAGE_BYTES  # the next page boundary in the segment
    data = bytearray(seg.read_bytes())
    data[page : page + PAGE_BYTES] = bytes(PAGE_BYTES)
    seg.write_bytes(bytes(data))
    lo, hi = seg_base(seg) + page, seg_base(seg) + page + PAGE_BYTES
    hit = {u.message_id for u in stopped.units if u.phys < hi and u.end > lo}
    run = restart(store)
    assert_never_garbage(stopped, run.served)
    assert set(run.served.bodies) == {u.message_id for u in stopped.units} - hit
    assert len(run.served.refused) == len(hit) > 0
    assert all(str(seg) in why for _, _, why in run.served.refused), run.served.refused
    refusals = [line for line in run.proc.output if "refused" in line and str(seg) in line]
    assert refusals, "the broker did not log the refused reads"


def start_with_a_flipped_body_byte(stopped: Golden, tmp_path: Path) -> tuple[Any, Any]:
    """A copy of the store with one body bit flipped in the middle unit, and a broker on it."""
    store = stopped.copy(tmp_path)
    victim = stopped.units[len(stopped.units) // 2]
    seg, local = stopped.segment_of(store, victim.phys)
    data = bytearray(seg.read_bytes())
    data[local + layout.HEADER_SIZE] ^= 0x01
    seg.write_bytes(bytes(data))
    return victim, start_broker(store.parent, config=CONFIG)


def test_batch_pull_up_to_a_corrupt_unit_serves_the_messages_before_it(
    stopped: Golden, tmp_path: Path
) -> None:
    victim, proc = start_with_a_flipped_body_byte(stopped, tmp_path)
    try:
        with RocketMQClient(proc.endpoint, max_attempts=1) as client:
            start = max(0, victim.queue_offset - 3)
            batch = client.pull(GROUP, TOPIC, victim.queue_id, start, 8, with_bounds=False)
            assert [m.queue_offset for m in batch.messages] == list(
                range(start, victim.queue_offset)
            )
    finally:
        stop_or_explain(proc)


def test_pop_consumers_get_past_a_corrupt_unit(stopped: Golden, tmp_path: Path) -> None:
    victim, proc = start_with_a_flipped_body_byte(stopped, tmp_path)
    try:
        with RocketMQClient(proc.endpoint) as client:
            stub = service_pb2_grpc.MessagingServiceStub(
                client.broker.transport.channel_for_process()
            )
            bodies: set[bytes] = set()
            for _ in range(len(stopped.units) // 16 + 8):
                request = service_pb2.ReceiveMessageRequest(
                    group=pb.Resource(name="chaos-pop"),
                    batch_size=32,
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
                    invisible_duration=Duration(seconds=60),
                    long_polling_timeout=Duration(seconds=0),
                )
                for r in stub.ReceiveMessage(
                    request, timeout=10, metadata=[("x-mq-client-id", "pop@1")]
                ):
                    if r.WhichOneof("content") == "message":
                        bodies.add(r.message.body)
        assert bodies == {u.body for u in stopped.units} - {victim.body}
    finally:
        stop_or_explain(proc)


def test_short_last_segment_is_a_torn_tail(crashed: Golden, restart: Any, tmp_path: Path) -> None:
    store = crashed.copy(tmp_path)
    victim = len(crashed.units) - 5
    seg, local = crashed.segment_of(store, crashed.units[victim].phys)
    with open(seg, "r+b") as fh:
        fh.truncate(local + 50)
    check_cut_at(crashed, victim, restart(store))
