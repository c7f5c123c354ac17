"""Store-level recovery: crashes, torn tails, damaged derived files, lost checkpoints."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message

Open = Callable[..., MessageStore]
ROOT = Path(__file__).resolve().parents[2]


def crash_child(store_dir: Path, mode: str, count: int, kill_after_acks: int) -> list[str]:
    """Run the child, SIGKILL it after ``kill_after_acks`` acks; return the acked ids."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_child", str(store_dir), mode, str(count)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("ack"):
            acked.append(line.split()[2])
            if len(acked) >= kill_after_acks:
                break
        elif line.strip() == "done":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    return acked


def all_ids(store: MessageStore, topic: str = "orders") -> list[str]:
    ids = []
    for qid in store.queue_ids(topic):
        got = store.get_messages(QueueRead(topic, qid, store.min_offset(topic, qid), 10_000))
        ids.extend(m.message_id for m in got.messages)
    return ids


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_loses_nothing_acknowledged(open_store: Open, tmp_path: Path, mode: str) -> None:
    store_dir = tmp_path / "store"
    acked = crash_child(store_dir, mode, count=400, kill_after_acks=150)
    assert len(acked) == 150
    store = open_store(store_dir)
    assert store.recovery is not None and store.recovery.abnormal_shutdown
    assert set(acked) <= set(all_ids(store))
    n = store.max_offset("orders", 0)
    assert store.put_message(make_message(1000, queue_id=0)).queue_offset == n


def damage(path: Path, how: str, seed: int = 7) -> None:
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    if how == "garbage":
        start = rng.randrange(len(data) // 4)
        data[start:] = rng.randbytes(len(data) - start)
    elif how == "zero-page":
        data[:4096] = bytes(min(4096, len(data)))
    elif how == "truncate":
        data = data[: len(data) // 3]
    path.write_bytes(bytes(data))


def snapshot_reads(store: MessageStore) -> dict[int, list[bytes]]:
    return {
        q: [m.body for m in store.get_messages(QueueRead("orders", q, 0, 10_000)).messages]
        for q in store.queue_ids("orders")
    }


@pytest.mark.parametrize("how", ["garbage", "zero-page", "truncate", "delete"])
def test_damaged_consume_queue_is_rebuilt(open_store: Open, tmp_path: Path, how: str) -> None:
    store = open_store()
    store.put_messages([make_message(i, queue_id=i % 2) for i in range(200)])
    store.wait_dispatched()
    before = snapshot_reads(store)
    store.close()
    victim = sorted((tmp_path / "store" / "consumequeue" / "orders" / "1").iterdir())[0]
    victim.unlink() if how == "delete" else damage(victim, how)
    store = open_store()
    assert store.recovery is not None and "orders:1" in store.recovery.rebuilt_queues
    assert snapshot_reads(store) == before
    assert store.put_message(make_message(500, queue_id=1)).queue_offset == 100


def test_whole_queue_directory_deleted_is_noticed(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    store.put_messages([make_message(i, queue_id=i % 2) for i in range(50)])
    store.close()
    shutil.rmtree(tmp_path / "store" / "consumequeue" / "orders" / "0")
    store = open_store()
    assert store.max_offset("orders", 0) == 25
    assert store.put_message(make_message(7, queue_id=0)).queue_offset == 25


@pytest.mark.parametrize("how", ["garbage", "zero-page", "truncate", "delete"])
def test_damaged_index_is_rebuilt(open_store: Open, tmp_path: Path, how: str) -> None:
    store = open_store()
    for start in range(0, 600, 100):  # several index files (256 entries each)
        store.put_messages([make_message(i) for i in range(start, start + 100)])
    store.close()
    files = sorted(p for p in (tmp_path / "store" / "index").iterdir() if p.name.isdigit())
    assert len(files) >= 3
    victim = files[1]
    victim.unlink() if how == "delete" else damage(victim, how)
    store = open_store()
    assert store.recovery is not None and store.recovery.index_problems
    for i in range(0, 600, 37):
        assert [m.properties["n"] for m in store.query_by_key(f"key-{i}")] == [str(i)]


def test_corrupt_checkpoint_falls_back_to_backup(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    store.put_messages([make_message(i) for i in range(30)])
    store.close()
    damage(tmp_path / "store" / "checkpoint", "garbage")
    store = open_store()
    assert store.recovery is not None
    assert "parse" in store.recovery.checkpoint_problem
    assert len(all_ids(store)) == 30


def test_lost_checkpoint_rebuilds_everything(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    store.put_messages([make_message(i, queue_id=i % 3) for i in range(90)])
    store.wait_dispatched()
    before = snapshot_reads(store)
    store.close()
    for name in ("checkpoint", "checkpoint.bak"):
        (tmp_path / "store" / name).unlink(missing_ok=True)
    damage(sorted((tmp_path / "store" / "consumequeue" / "orders" / "2").iterdir())[0], "garbage")
    store = open_store()
    assert snapshot_reads(store) == before
    assert store.query_by_key("key-42")[0].properties["n"] == "42"


def test_torn_commitlog_tail_truncates_queues_too(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    results = store.put_messages([make_message(i) for i in range(20)])
    store.close()
    last = results[-3]
    base = last.physical_offset - last.physical_offset % 65536
    segment = tmp_path / "store" / "commitlog" / f"{base:020d}"
    data = bytearray(segment.read_bytes())
    data[last.physical_offset % 65536 + 50] ^= 0xFF
    segment.write_bytes(bytes(data))
    os.utime(segment)
    (tmp_path / "store" / "abort").touch()
    # Pretend the crash happened before the checkpoint covered these units.
    from broker_core.store.flush import Checkpoint

    cp, _ = Checkpoint.load(tmp_path / "store" / "checkpoint")
    assert cp is not None
    cp.physical_flushed = cp.dispatched = results[10].physical_offset
    cp.queue_offsets = {"orders": {"0": [0, 10]}}
    cp.save(tmp_path / "store" / "checkpoint")
    store = open_store()
    assert store.recovery is not None and store.recovery.dropped_bytes > 0
    assert store.max_offset("orders", 0) == 17
    assert store.put_message(make_message(77)).queue_offset == 17
