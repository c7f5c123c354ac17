"""A second ``rmq broker start`` on a store in use is refused; nothing acknowledged is lost.

The contract: it exits non-zero within 10 s and its message says the store is locked,
naming the holder's pid. Before the lock existed, the second broker "recovered" the live
store and both handed out the same queue offsets (issue 13, item 1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from broker_core.client import RocketMQClient

RMQ = Path(sys.executable).with_name("rmq")


def start(store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(RMQ),
            "broker",
            "start",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            str(store),
            "--flush",
            "sync",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ready(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("READY "):
            return line.split()[1]
    raise AssertionError(f"broker exited with {proc.wait(10)} before READY")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    assert proc.wait(30) == 0


def bodies(endpoint: str) -> list[bytes]:
    with RocketMQClient(endpoint) as client:
        return [m.body for m in client.pull("g", "orders", 0, 0, 100).messages]


def test_second_broker_on_a_store_in_use_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = start(store)
    try:
        endpoint = ready(first)
        with RocketMQClient(endpoint) as client:
            client.create_topic("orders", queues=1)
            for i in range(3):
                client.send("orders", f"acked-{i}")
        second = start(store)
        try:  # refused at once, not blocked on the lock; the bound only guards a hang
            out, _ = second.communicate(timeout=120)
        finally:
            if second.poll() is None:  # never leave a second broker to take the lock later
                second.kill()
                second.wait()
        assert second.returncode != 0
        assert "locked" in out and f"pid {first.pid}" in out, out
        assert "Traceback" not in out, out
        with RocketMQClient(endpoint) as client:  # the first broker serves on, unharmed
            client.send("orders", "acked-3")
        assert bodies(endpoint) == [f"acked-{i}".encode() for i in range(4)]
    finally:
        stop(first)
    again = start(store)
    try:
        assert bodies(ready(again)) == [f"acked-{i}".encode() for i in range(4)]
    finally:
        stop(again)
