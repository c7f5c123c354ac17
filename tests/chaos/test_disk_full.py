"""A broker whose store lives on a small tmpfs: fill it, check the refusal, free space.

Two ways to run out of disk, one test each:

* ``guard``: another writer fills the disk (a filler file made while the broker runs)
  past the store's ``disk_full_ratio`` (the default 0.95); the store's own check refuses
  appends although the filesystem still has room.
* ``enospc``: the guard is off (ratio 1.0) and the broker's own sends fill the disk, so
  creating the next commitlog segment (``posix_fallocate``) fails with ENOSPC. Filler
  files made before the broker starts are what is freed afterwards.

Either way a send must fail with a retriable TOO_MANY_REQUESTS error that names the disk
or space (our client: ``BusyError``; the official client: ``TooManyRequestsException``),
the broker must stay up and keep serving every acknowledged message, sends must succeed
again once space is freed, and everything acknowledged must still be there after a clean
restart. Retention by disk pressure is off (``disk_max_used_ratio = 1.0``): it would
delete the oldest segments, acknowledged or not, by design.

Needs root (``mount``); the test fails, rather than skips, when it cannot mount.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.v5.exception import TooManyRequestsException

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.errors import BusyError, RocketMQError
from tests.chaos.load import AckLog, Audit, ChaosBroker, audit, read_back, wait_until

MIB = 1 << 20
KIB = 1 << 10
TOPIC = "chaos-disk"
BODY_BYTES = 16 * KIB
BATCH = 8
GUARD_RATIO = 0.95  # the default disk_full_ratio
STORE_CONFIG = {
    "segment_size_bytes": 1 * MIB,
    "max_body_bytes": 64 * KIB,
    "max_properties_bytes": 8 * KIB,
    "consume_queue_units_per_file": 16_384,
    "index_slot_count": 4_096,
    "index_max_entries": 16_384,
    "disk_max_used_ratio": 1.0,
    "file_reserved_hours": 10_000.0,
}
RATIOS = {"guard": GUARD_RATIO, "enospc": 1.0}


@dataclass(frozen=True, slots=True)
class DiskPlan:
    rounds: int  # fill / refuse / free cycles
    tmpfs_bytes: dict[str, int]  # by mode
    filler_bytes: int  # enospc: one pre-made filler per round, freed at its end
    batches_per_round: int  # guard: batches sent before the filler fills the disk


# guard: 4 % of the tmpfs (its filler stops at 96 %) must hold a new 1 MiB segment and the
# few batches accepted before the guard's next look (it looks at most twice a second).
SHORT = DiskPlan(
    rounds=1,
    tmpfs_bytes={"guard": 64 * MIB, "enospc": 20 * MIB},
    filler_bytes=4 * MIB,
    batches_per_round=10,
)
FULL = DiskPlan(
    rounds=5,
    tmpfs_bytes={"guard": 128 * MIB, "enospc": 128 * MIB},
    filler_bytes=8 * MIB,
    batches_per_round=40,
)


@contextmanager
def tmpfs(mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` at ``mount_point``; unmount on exit."""
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs at {mount_point} (the disk-full test needs root, "
            f"uid is {os.getuid()}): {done.stderr.strip()}"
        )
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


def make_filler(path: Path, size_bytes: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.posix_fallocate(fd, 0, size_bytes)
    finally:
        os.close(fd)


def mentions_disk(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "disk" in text or "space" in text


def assert_clear_refusal(exc: BaseException) -> None:
    """Our client's view: BusyError (retriable) from TOO_MANY_REQUESTS, naming the disk."""
    assert isinstance(exc, BusyError) and exc.retriable, f"{type(exc).__name__}: {exc}"
    assert "TOO_MANY_REQUESTS" in str(exc) and mentions_disk(exc), str(exc)


class Sender:
    """Sends numbered batches with one attempt each, recording the acknowledged ones."""

    def __init__(self, client: RocketMQClient) -> None:
        self.client = client
        self.acks = AckLog()
        self.seq = 0

    def send(self, count: int = BATCH) -> None:
        bodies = [(b"D-%08d-" % (self.seq + i)).ljust(BODY_BYTES, b".") for i in range(count)]
        self.seq += count
        receipts = self.client.send_batch(TOPIC, [OutgoingMessage(b) for b in bodies])
        for body, receipt in zip(bodies, receipts, strict=True):
            self.acks.record(body, receipt.message_id)

    def refusal(self) -> BusyError | None:
        """Send one batch; the BusyError if refused, None if accepted (others raise)."""
        try:
            self.send()
        except BusyError as exc:
            return exc
        return None

    def fill(self, limit_bytes: int) -> RocketMQError:
        """Send until a send fails; returns its error (AssertionError if none within the
        number of batches ``limit_bytes`` could hold twice over)."""
        for _ in range(2 * limit_bytes // (BODY_BYTES * BATCH) + 1):
            try:
                self.send()
            except RocketMQError as exc:
                return exc
        raise AssertionError(f"{self.acks.count()} messages sent and the disk is not full")

    def audit(self) -> Audit:
        return audit(self.acks.snapshot(), read_back(self.client, TOPIC))


def official_refusal(endpoint: str, *, may_fit: bool = False) -> str:
    """The official Producer's view of a full broker: TooManyRequestsException at once.

    ``may_fit``: the disk has no room for a new segment, but one small message may still
    fit in the current segment (batches are refused whole, singles can land); then ""
    when it was accepted.
    """
    producer = Producer(ClientConfiguration(endpoint, Credentials()), [TOPIC])
    producer.startup()
    try:
        msg = Message()
        msg.topic, msg.body = TOPIC, b"official".ljust(BODY_BYTES, b".")
        try:
            producer.send(msg)
        except TooManyRequestsException as refused:
            assert mentions_disk(refused), str(refused)
            return str(refused)
        assert may_fit, "the official producer's send was accepted on a full disk"
        return ""
    finally:
        producer.shutdown()


def fill_by_sending(
    sender: Sender, mnt: Path, plan: DiskPlan, round_no: int
) -> tuple[BaseException, Callable[[], None]]:
    """enospc: the broker's own sends fill the disk; freeing deletes a pre-made filler."""
    exc = sender.fill(plan.tmpfs_bytes["enospc"])
    return exc, (mnt / f"filler-{round_no}").unlink


def fill_from_outside(
    sender: Sender, mnt: Path, plan: DiskPlan, round_no: int
) -> tuple[BaseException, Callable[[], None]]:
    """guard: send some, then another writer takes the disk to 96 %; freeing deletes it."""
    for _ in range(plan.batches_per_round):
        sender.send()
    usage = shutil.disk_usage(mnt)
    filler = mnt / f"outside-{round_no}"
    make_filler(filler, int(usage.total * 0.96) - usage.used)
    exc = wait_until(sender.refusal, 10, "the disk guard to refuse sends", 0.1)
    assert f"more than {GUARD_RATIO:.0%} full" in str(exc), str(exc)
    return exc, filler.unlink


FILLS = {"guard": fill_from_outside, "enospc": fill_by_sending}


def run_rounds(broker: ChaosBroker, mnt: Path, mode: str, plan: DiskPlan) -> dict[str, object]:
    """Fill / check / free ``plan.rounds`` times; returns figures."""
    errors: set[str] = set()
    official = ""
    with RocketMQClient(broker.endpoint, max_attempts=1, timeout_s=10) as client:
        client.create_topic(TOPIC, queues=2)
        sender = Sender(client)
        for round_no in range(plan.rounds):
            before = sender.acks.count()
            exc, free_space = FILLS[mode](sender, mnt, plan, round_no)
            assert_clear_refusal(exc)
            errors.add(str(exc).replace(str(mnt), "<tmpfs>"))
            assert sender.acks.count() > before, "nothing was accepted in this round"
            assert broker.alive(), broker.log_tail()
            again = sender.refusal()  # still full: still the same answer
            assert again is not None, "a send was accepted on a full disk"
            assert_clear_refusal(again)
            official = official or official_refusal(broker.endpoint, may_fit=mode == "enospc")
            lost = sender.audit().lost
            assert lost == [], f"{len(lost)} acknowledged messages unreadable on a full disk"
            free_space()
            wait_until(lambda: sender.refusal() is None, 10, "sends to be accepted again")
    assert broker.stop() == 0, broker.log_tail()
    broker.start()  # the caller stops this one
    with RocketMQClient(broker.endpoint, timeout_s=10) as client:
        result = audit(sender.acks.snapshot(), read_back(client, TOPIC))
    assert result.lost == [], f"{len(result.lost)} acknowledged messages lost over a restart"
    return {
        "rounds": plan.rounds,
        "acknowledged": result.acknowledged,
        "lost": 0,
        "stored": result.stored,
        "unacked_stored": result.unacked_stored,
        "duplicates": result.duplicates,
        "errors": sorted(errors),
        "official_error": official.replace(str(mnt), "<tmpfs>"),
    }


@pytest.mark.parametrize("mode", sorted(RATIOS))
@pytest.mark.parametrize(
    "plan", [pytest.param(SHORT, id="short"), pytest.param(FULL, id="full", marks=pytest.mark.slow)]
)
def test_full_disk_refuses_sends_keeps_data_and_recovers(
    tmp_path: Path, mode: str, plan: DiskPlan, chaos_figures
) -> None:
    with tmpfs(tmp_path / "mnt", plan.tmpfs_bytes[mode]) as mnt:
        if mode == "enospc":
            for round_no in range(plan.rounds):
                make_filler(mnt / f"filler-{round_no}", plan.filler_bytes)
        config = {"store": {**STORE_CONFIG, "disk_full_ratio": RATIOS[mode]}}
        broker = ChaosBroker(mnt / "broker", flush="sync", config=config)
        broker.start()
        try:
            figures = run_rounds(broker, mnt, mode, plan)
        except BaseException:
            broker.kill()
            raise
        assert broker.stop() == 0, broker.log_tail()
    chaos_figures(f"disk-full mode={mode}", **figures)


def test_no_room_for_derived_files_is_a_transient_refusal(tmp_path: Path) -> None:
    """The commitlog has room but a new consume-queue file does not fit: sends must be
    refused as for any full disk, and accepted again once space returns."""
    config = {
        "store": {**STORE_CONFIG, "disk_full_ratio": 1.0, "consume_queue_units_per_file": 4}
    }  # a new 80-byte file every 4 units
    with tmpfs(tmp_path / "mnt", 24 * MIB) as mnt:
        make_filler(mnt / "later", 4 * MIB)
        make_filler(mnt / "one-segment", 1 * MIB + 4 * KIB)
        broker = ChaosBroker(mnt / "broker", flush="sync", config=config)
        broker.start()
        try:
            with RocketMQClient(broker.endpoint, max_attempts=1, timeout_s=10) as client:
                client.create_topic(TOPIC, queues=2)
                sender = Sender(client)
                sender.send(3)  # later batches straddle consume-queue files
                assert_clear_refusal(sender.fill(24 * MIB))  # no room for a segment
                rest = shutil.disk_usage(mnt).free
                if rest:
                    make_filler(mnt / "rest", rest)
                (mnt / "one-segment").unlink()  # room for a segment and one page more
                refusals = [sender.refusal() for _ in range(4)]
                assert any(refusals), "four batches fitted in one page of consume queues"
                for exc in filter(None, refusals):
                    assert_clear_refusal(exc)
                (mnt / "later").unlink()
                (mnt / "rest").unlink(missing_ok=True)
                wait_until(lambda: sender.refusal() is None, 10, "sends to be accepted again")
                assert sender.audit().lost == []
        except BaseException:
            broker.kill()
            raise
        assert broker.stop() == 0, broker.log_tail()
