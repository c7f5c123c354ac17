"""The store lock: one process per store directory, released on close and on death."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker_core.errors import StoreLockedError
from broker_core.message import Message
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import small_config


def test_second_store_on_a_directory_in_use_is_refused(tmp_path: Path) -> None:
    first = MessageStore(small_config(tmp_path))
    first.open()
    try:
        first.put_messages([Message("orders", b"acknowledged")])
        held_by_us = rf"locked by another broker \(pid {os.getpid()}\)"
        with pytest.raises(StoreLockedError, match=held_by_us):
            MessageStore(small_config(tmp_path)).open()
        # the refused opener touched nothing: the first keeps its abort marker and data
        assert (tmp_path / "abort").exists()
        assert first.wait_dispatched()
        got = first.get_messages(QueueRead("orders", 0, 0, 10)).messages
        assert [m.body for m in got] == [b"acknowledged"]
    finally:
        first.close()
    second = MessageStore(small_config(tmp_path))
    second.open()  # released by close
    try:
        assert second.max_offset("orders", 0) == 1
    finally:
        second.close()


def test_acquire_without_open_is_released_by_close(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path))
    store.acquire_lock()
    with pytest.raises(StoreLockedError):
        MessageStore(small_config(tmp_path)).acquire_lock()
    store.close()
    other = MessageStore(small_config(tmp_path))
    other.acquire_lock()
    other.close()


def test_lock_of_a_killed_process_is_released(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "from broker_core.store.lock import StoreLock\n"
        "from pathlib import Path\n"
        "StoreLock(Path(sys.argv[1])).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(StoreLockedError, match=rf"pid {child.pid}\)"):
            MessageStore(small_config(tmp_path)).open()
    finally:
        child.kill()
        child.wait(10)
    store = MessageStore(small_config(tmp_path))
    store.open()  # SIGKILL released the lock; the stale pid in the file does not matter
    store.close()
