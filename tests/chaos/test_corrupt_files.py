"""Torn and corrupt store files under a real broker process.

A broker stores messages sent by our client, stops (SIGKILL, or SIGTERM), and a copy of its
store is damaged the ways a crash or a disk can: the commitlog torn, overwritten with
garbage, a page zeroed, a bit flipped; consume queue, index and checkpoint files mangled;
config files torn. The broker restarted on the copy must start, serve every message before
the damage byte for byte, never serve anything else, rebuild what is derived so pulls and
key queries work, and say in its log what it dropped.

``tests/store/test_recovery.py`` covers recovery on the store object; this is the same
contract end to end, through the server and the client. Two stores are made once per
module: ``crashed`` (SIGKILL with the flush and checkpoint intervals long, so the
checkpoint still says 0 and recovery scans the whole commitlog) and ``stopped`` (SIGTERM:
everything flushed and checkpointed, so damage below the checkpoint is only found when
read). The slow run repeats the crash cases over many random damage points.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client import RocketMQClient
from broker_core.errors import CorruptionError, MessageCorruptedError
from broker_core.protocol import unit as layout
from broker_core.server.launcher import BrokerProcess
from broker_core.store import codec
from tests.server.conftest import start_broker

TOPIC, GROUP = "chaos-orders", "chaos-readers"
QUEUES = 2
MESSAGES = 160
SEGMENT_BYTES = 128 << 10
PAGE_BYTES = 4096
CONFIG: dict[str, dict[str, Any]] = {
    "store": {
        "segment_size_bytes": SEGMENT_BYTES,
        "max_body_bytes": 16 << 10,
        "max_properties_bytes": 4 << 10,
        "consume_queue_units_per_file": 32,
        "index_slot_count": 64,
        "index_max_entries": 64,
        # Nothing flushed or checkpointed by a timer: after a SIGKILL the checkpoint
        # still says 0 and recovery scans (and must verify) the whole commitlog.
        "flush_interval_ms": 600_000,
        "derived_flush_interval_ms": 600_000,
    },
    "broker": {"offsets_persist_interval_ms": 600_000},
}
CORRUPT = (MessageCorruptedError, CorruptionError)  # refused by the broker, or by our client


@dataclass(frozen=True)
class Unit:
    """One sent message and where the commitlog holds it."""

    message_id: str
    key: str
    body: bytes
    queue_id: int
    queue_offset: int
    phys: int
    size: int

    @property
    def end(self) -> int:
        return self.phys + self.size


@dataclass(frozen=True)
class Golden:
    """A store left by a broker, and the units in it in commitlog order."""

    workdir: Path
    units: list[Unit]

    def copy(self, to: Path) -> Path:
        shutil.copytree(self.workdir / "store", to / "store")
        return to / "store"

    def segment_of(self, store: Path, phys: int) -> tuple[Path, int]:
        """The segment file holding ``phys`` and the position inside it."""
        base = phys - phys % SEGMENT_BYTES
        return store / "commitlog" / f"{base:020d}", phys - base


def scan_units(store: Path) -> list[tuple[int, Any]]:
    """(physical offset, decoded message) of every unit, read with the codec alone."""
    found = []
    for seg in sorted((store / "commitlog").iterdir()):
        data, base, pos = seg.read_bytes(), int(seg.name), 0
        while pos + layout.MIN_BLANK_BYTES <= len(data):
            total, magic = layout.SIZE_MAGIC.unpack_from(data, pos)
            if total == 0 or magic == layout.BLANK_MAGIC:
                break
            codec.check_unit(data, pos, base + pos)
            found.append((base + pos, codec.decode(data, pos)))
            pos += total
    return found


def populate(workdir: Path, *, crash: bool, seed: int) -> Golden:
    """Send MESSAGES messages (random bodies, one key each), commit offsets, stop."""
    rng = random.Random(seed)
    proc = start_broker(workdir, config=CONFIG)
    sent: dict[str, tuple[str, bytes]] = {}
    with RocketMQClient(proc.endpoint) as client:
        client.create_topic(TOPIC, queues=QUEUES)
        client.create_group(GROUP)
        for start in range(0, MESSAGES, 40):
            batch = [
                (rng.randbytes(rng.randrange(1, 3000)), "T", [f"key-{i}"])
                for i in range(start, start + 40)
            ]
            for receipt, item in zip(client.send_batch(TOPIC, batch), batch, strict=True):
                sent[receipt.message_id] = (item[2][0], item[0])
        for qid in range(QUEUES):
            client.update_offset(GROUP, TOPIC, qid, 5 + qid)
    if crash:
        proc.kill()
    else:
        stop_or_explain(proc)
    units = []
    for phys, msg in scan_units(workdir / "store"):
        key, body = sent.pop(msg.message_id)
        assert body == msg.body
        units.append(
            Unit(msg.message_id, key, body, msg.queue_id, msg.queue_offset, phys, msg.stored_size)
        )
    assert not sent, "a sent message is missing from the store"
    assert units[-1].end > SEGMENT_BYTES, "the store should span two segments"
    return Golden(workdir, units)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    return populate(tmp_path_factory.mktemp("crashed"), crash=True, seed=1)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    return populate(tmp_path_factory.mktemp("stopped"), crash=False, seed=2)


# ---- the broker on a damaged copy ---------------------------------------------------------


@dataclass
class Served:
    """What the restarted broker served, queue by queue."""

    bodies: dict[str, bytes] = field(default_factory=dict)  # message id → body
    refused: list[tuple[int, int, str]] = field(default_factory=list)  # queue, offset, why
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)


def read_queue(client: RocketMQClient, qid: int, low: int, high: int, served: Served) -> None:
    """Pull [low, high); a unit the broker refuses is recorded and stepped over."""
    offset = low
    while offset < high:
        try:
            batch = client.pull(GROUP, TOPIC, qid, offset, high - offset, with_bounds=False)
        except CORRUPT:
            try:  # one by one, to find the refused unit and keep the rest
                batch = client.pull(GROUP, TOPIC, qid, offset, 1, with_bounds=False)
            except CORRUPT as exc:
                served.refused.append((qid, offset, str(exc)))
                offset += 1
                continue
        for m in batch.messages:
            assert m.message_id not in served.bodies, f"{m.message_id} served twice"
            served.bodies[m.message_id] = m.body
        assert batch.next_offset > offset, f"no progress at {qid}@{offset}"
        offset = batch.next_offset


def serve_all(client: RocketMQClient) -> Served:
    served = Served()
    for row in client.topic_status(TOPIC):
        qid, low, high = int(row["queue_id"]), int(row["min_offset"]), int(row["max_offset"])
        served.bounds[qid] = (low, high)
        read_queue(client, qid, low, high, served)
    return served


@dataclass
class Restarted:
    proc: BrokerProcess
    served: Served
    opened: str  # the "store opened: …" log line (the recovery report)


@pytest.fixture
def restart() -> Iterator[Callable[[Path], Restarted]]:
    procs: list[BrokerProcess] = []

    def run(store: Path) -> Restarted:
        proc = start_broker(store.parent, config=CONFIG)
        procs.append(proc)
        with RocketMQClient(proc.endpoint, max_attempts=1) as client:
            served = serve_all(client)
        [opened] = [line for line in proc.output if "store opened:" in line]
        return Restarted(proc, served, opened)

    yield run
    for proc in procs:
        stop_or_explain(proc)


def stop_or_explain(proc: BrokerProcess, timeout_s: float = 30) -> None:
    """SIGTERM and expect a clean exit; a hang fails with the broker's thread stacks."""
    try:
        code = proc.stop(timeout_s)
    except subprocess.TimeoutExpired:
        spy = Path(sys.executable).with_name("py-spy")
        stacks = subprocess.run(
            [str(spy), "dump", "--pid", str(proc.process.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        proc.kill()
        pytest.fail(
            f"the broker did not stop {timeout_s} s after SIGTERM\n{stacks}\n"
            + "".join(proc.output[-30:])
        )
    assert code == 0, "".join(proc.output[-30:])


def assert_never_garbage(golden: Golden, served: Served) -> None:
    by_id = {u.message_id: u for u in golden.units}
    for message_id, body in served.bodies.items():
        assert message_id in by_id, f"served a message never sent: {message_id}"
        assert body == by_id[message_id].body, f"{message_id} served with a different body"


def assert_keys(proc: BrokerProcess, units: list[Unit], *, found: bool, sample: int = 6) -> None:
    """Key queries find exactly the sampled units (``found``) or nothing."""
    rng = random.Random(len(units))
    with RocketMQClient(proc.endpoint) as client:
        for unit in rng.sample(units, min(sample, len(units))):
            hits = client.query_message(key=unit.key, topic=TOPIC)
            assert [h["message_id"] for h in hits] == ([unit.message_id] if found else []), (
                unit.key,
                hits,
            )


def assert_appends_continue(proc: BrokerProcess, served: Served) -> None:
    """A new message lands right after its queue's last message and reads back."""
    with RocketMQClient(proc.endpoint) as client:
        receipt = client.send(TOPIC, b"after recovery")
        after = {int(r["queue_id"]): int(r["max_offset"]) for r in client.topic_status(TOPIC)}
        grown = [q for q in after if after[q] != served.bounds[q][1]]
        assert len(grown) == 1 and after[grown[0]] == served.bounds[grown[0]][1] + 1
        assert receipt.offset == served.bounds[grown[0]][1]
        [m] = client.pull(GROUP, TOPIC, grown[0], receipt.offset, 1, with_bounds=False).messages
        assert m.body == b"after recovery"


# ---- commitlog damage after a crash: recovery cuts at the first bad unit ------------------


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
            stub = service_pb2_grpc.MessagingServiceStub(client._channel_for_process())
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


# ---- derived files: rebuilt from the commitlog ----------------------------------------------


def mangle(path: Path, how: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    if how == "garbage":
        at = rng.randrange(len(data) // 2)
        data[at:] = rng.randbytes(len(data) - at)
    elif how == "zero-page":
        data[:PAGE_BYTES] = bytes(min(PAGE_BYTES, len(data)))
    path.write_bytes(bytes(data))


def test_damaged_queue_index_and_checkpoint_are_rebuilt(
    stopped: Golden, restart: Any, tmp_path: Path
) -> None:
    store = stopped.copy(tmp_path)
    rng = random.Random(3)
    queue_files = sorted((store / "consumequeue" / TOPIC / "0").iterdir())
    mangle(queue_files[1], "garbage", rng)
    index_files = sorted(p for p in (store / "index").iterdir() if p.name.isdigit())
    assert len(index_files) >= 3
    mangle(index_files[1], "zero-page", rng)
    shutil.copy(store / "checkpoint", store / "checkpoint.bak")  # a torn rewrite of it
    mangle(store / "checkpoint", "garbage", rng)
    run = restart(store)
    assert_never_garbage(stopped, run.served)
    assert set(run.served.bodies) == {u.message_id for u in stopped.units}
    assert f"rebuilt queue {TOPIC}:0" in run.opened
    assert "index: " in run.opened and "checkpoint: " in run.opened, run.opened
    assert_keys(run.proc, stopped.units, found=True, sample=12)
    assert_appends_continue(run.proc, run.served)


def test_lost_queues_index_and_checkpoints_are_rebuilt_from_scratch(
    stopped: Golden, restart: Any, tmp_path: Path
) -> None:
    store = stopped.copy(tmp_path)
    shutil.rmtree(store / "consumequeue")
    shutil.rmtree(store / "index")
    for name in ("checkpoint", "checkpoint.bak"):
        (store / name).unlink(missing_ok=True)
    run = restart(store)
    assert set(run.served.bodies) == {u.message_id for u in stopped.units}
    assert_never_garbage(stopped, run.served)
    assert "rebuilt from scratch" in run.opened
    assert_keys(run.proc, stopped.units, found=True, sample=12)


# ---- config files: the backup copy is used; a table with no good copy stops the start ------

CONFIG_FILES = ["topics.json", "subscriptionGroup.json", "consumerOffset.json"]


def tear_config(store: Path, name: str, rng: random.Random, *, backup: bool) -> None:
    """Garble ``name``; with ``backup`` its ``.bak`` holds the same data (a torn rewrite)."""
    path = store / "config" / name
    if backup:
        shutil.copy(path, path.with_name(name + ".bak"))
    else:
        path.with_name(name + ".bak").unlink(missing_ok=True)
    mangle(path, "garbage", rng)


def test_torn_config_files_fall_back_to_their_backups(
    stopped: Golden, restart: Any, tmp_path: Path
) -> None:
    store = stopped.copy(tmp_path)
    for name in CONFIG_FILES:
        tear_config(store, name, random.Random(name), backup=True)
    run = restart(store)
    assert set(run.served.bodies) == {u.message_id for u in stopped.units}
    assert set(run.served.bounds) == set(range(QUEUES))  # the topic kept its queue count
    with RocketMQClient(run.proc.endpoint) as client:
        assert GROUP in {g["name"] for g in client.list_groups()}
        assert [client.get_offset(GROUP, TOPIC, q) for q in range(QUEUES)] == [5, 6]


def test_config_fallbacks_are_reported(stopped: Golden, restart: Any, tmp_path: Path) -> None:
    store = stopped.copy(tmp_path)
    for name in CONFIG_FILES:
        tear_config(store, name, random.Random(name), backup=True)
    run = restart(store)
    log = "".join(run.proc.output)
    assert all(name in log for name in CONFIG_FILES), log[-3000:]


@pytest.mark.parametrize("name", ["topics.json", "subscriptionGroup.json"])
def test_config_table_without_a_good_copy_stops_the_start(
    stopped: Golden, tmp_path: Path, name: str
) -> None:
    """Starting empty would forget every topic (or group) at the next write: refuse."""
    store = stopped.copy(tmp_path)
    tear_config(store, name, random.Random(name), backup=False)
    with pytest.raises(RuntimeError, match="broker exited before READY") as failed:
        start_broker(store.parent, config=CONFIG)
    assert name in str(failed.value) and "unreadable" in str(failed.value)


def test_offsets_without_a_good_copy_are_not_silently_forgotten(
    stopped: Golden, restart: Any, tmp_path: Path
) -> None:
    store = stopped.copy(tmp_path)
    tear_config(store, "consumerOffset.json", random.Random(9), backup=False)
    try:
        run = restart(store)
    except RuntimeError as exc:  # refusing to start is one acceptable answer
        assert "consumerOffset.json" in str(exc)
        return
    assert "consumerOffset.json" in "".join(run.proc.output)  # reporting it is the other
