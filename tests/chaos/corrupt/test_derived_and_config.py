"""Damaged derived files (consume queues, index, checkpoints) are rebuilt from the commitlog;
torn config files fall back to their backups, and a table with no good copy stops the start."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from broker_core.client import RocketMQClient
from tests.chaos.corrupt.conftest import (
    CONFIG,
    GROUP,
    PAGE_BYTES,
    QUEUES,
    TOPIC,
    Golden,
    assert_appends_continue,
    assert_keys,
    assert_never_garbage,
)
from tests.server.conftest import start_broker


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
