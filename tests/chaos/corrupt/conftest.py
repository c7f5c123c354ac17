"""Torn and corrupt store files under a real broker process: the stores, the restart, the checks.

A broker stores messages sent by our client, stops (SIGKILL, or SIGTERM), and a copy of its
store is damaged the ways a crash or a disk can: the commitlog torn, overwritten with
garbage, a page zeroed, a bit flipped; consume queue, index and checkpoint files mangled;
config files torn. The broker restarted on the copy must start, serve every message before
the damage byte for byte, never serve anything else, rebuild what is derived so pulls and
key queries work, and say in its log what it dropped.

``tests/store/test_recovery.py`` covers recovery on the store object; this is the same
contract end to end, through the server and the client. Two stores are made once per
package: ``crashed`` (SIGKILL with the flush and checkpoint intervals long, so the
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


@pytest.fixture(scope="package")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    return populate(tmp_path_factory.mktemp("crashed"), crash=True, seed=1)


@pytest.fixture(scope="package")
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
