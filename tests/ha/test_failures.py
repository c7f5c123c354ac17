"""Failures around a broker group: the master killed under sync load loses no acknowledged
message; bad bytes on the HA port (either direction) close that one connection only."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from broker_core.client import RocketMQClient
from broker_core.config import StoreConfig
from broker_core.errors import RocketMQError
from broker_core.message import Message
from broker_core.store.message_store import MessageStore
from broker_core.store.replica import stored_bytes
from tests.ha.conftest import (
    Group,
    commitlog_bytes,
    pull_all,
    start_slave,
    wait_replicated,
    wait_until,
    written_end,
)
from tests.server.conftest import BrokerProcess

SYNC = {
    "replication": "sync",
    "sync_replication_timeout_ms": 2_000,
    "ha_catch_up_window_ms": 5_000,
    "min_in_sync_replicas": 2,
}


def produce_until_killed(
    master: BrokerProcess, topic: str, kill_after_acks: int, prefix: str = "kill"
) -> list[bytes]:
    """Send 16-message batches until the master is SIGKILLed (after ``kill_after_acks``
    acknowledged batches, from a second thread); returns every acknowledged body."""
    acked: list[bytes] = []
    enough = threading.Event()
    with RocketMQClient(master.endpoint, max_attempts=1, timeout_s=5) as client:
        killer = threading.Thread(target=lambda: enough.wait(60) and master.kill())
        killer.start()
        n = 0
        while master.process.poll() is None or not enough.is_set():
            batch = [f"{prefix}-{n + i:08d}".encode() for i in range(16)]
            n += 16
            try:
                client.send_batch(topic, batch)
            except RocketMQError:
                if enough.is_set():
                    break
                raise
            acked.extend(batch)
            if len(acked) >= kill_after_acks * 16:
                enough.set()
        killer.join()
    return acked


def wait_topic_on_slave(group: Group, topic: str) -> None:
    """The topic config is copied every ``ha_metadata_interval_ms``: wait for it."""
    with RocketMQClient(group.slave.endpoint, max_attempts=1) as slave:
        wait_until(
            lambda: topic in {t["name"] for t in slave.list_topics()},
            what=f"topic {topic} on the slave",
        )


def check_no_acked_loss(group: Group, topic: str, acked: list[bytes]) -> None:
    with RocketMQClient(group.slave.endpoint, max_attempts=1) as slave:
        wait_until(
            lambda: set(acked) <= set(pull_all(slave, topic, 4)),
            what="every acknowledged message readable on the slave",
        )
        on_slave = pull_all(slave, topic, 4)
        assert len(on_slave) == len(set(on_slave))  # each exactly once


def test_master_killed_under_sync_load_loses_no_acknowledged_message(
    group_factory: Callable[..., Group],
) -> None:
    group = group_factory(**SYNC)
    with RocketMQClient(group.master.endpoint, max_attempts=1) as master:
        master.create_topic("ha-kill", queues=4)
        wait_until(lambda: len(master.health()["replication"]["in_sync"]) == 1)
    wait_topic_on_slave(group, "ha-kill")
    acked = produce_until_killed(group.master, "ha-kill", kill_after_acks=150)
    assert len(acked) >= 150 * 16
    check_no_acked_loss(group, "ha-kill", acked)


def closed_by_peer(sock: socket.socket, timeout_s: float = 10) -> bool:
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass  # heartbeats or stream before the master notices
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_bad_reports_close_only_their_connection(group_factory: Callable[..., Group]) -> None:
    group = group_factory(**SYNC)
    host, port = group.master.ha_endpoint.rsplit(":", 1)
    with RocketMQClient(group.master.endpoint, max_attempts=1) as master:
        master.create_topic("ha-bad", queues=2)
        master.send("ha-bad", b"before")
        end = written_end(group.master.store_dir)
        bad_inputs = [
            struct.pack(">q", 1 << 40),  # past the master's end
            struct.pack(">q", -5),  # negative
            struct.pack(">q", end) + struct.pack(">q", end - 1),  # going backwards
            b"\x01\x02\x03",  # a torn report, then the peer goes away
        ]
        for data in bad_inputs:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(data)
                if len(data) == 3:
                    sock.shutdown(socket.SHUT_WR)
                assert closed_by_peer(sock), f"master kept a link after {data!r}"
        master.send("ha-bad", b"after")  # sync: the real slave still acks
        assert len(master.health()["replication"]["in_sync"]) == 1
    wait_replicated(group)


class FakeMaster:
    """A socket server a slave connects to; the test scripts what it sends."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(20)
        self.endpoint = f"127.0.0.1:{self.server.getsockname()[1]}"

    def next_link(self) -> tuple[socket.socket, int]:
        """Accept the slave's next stream connection; returns it and its first report."""
        while True:
            sock, _ = self.server.accept()
            sock.settimeout(10)
            first = struct.unpack(">q", _recv(sock, 8))[0]
            if first != -1:
                return sock, first
            sock.close()  # a metadata request: leave it unanswered


def _recv(sock: socket.socket, size: int) -> bytes:
    buf = b""
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        assert chunk, "closed"
        buf += chunk
    return buf


def frame(offset: int, body: bytes, size: int | None = None) -> bytes:
    return struct.pack(">qi", offset, len(body) if size is None else size) + body


def real_log(workdir: Path) -> bytes:
    store = MessageStore(StoreConfig(store_dir=str(workdir), segment_size_bytes=16 << 20))
    store.open()
    try:
        store.put_messages([Message("ha-fake", b"unit-%d" % i, queue_id=0) for i in range(20)])
        return stored_bytes(store.commitlog, 0, store.commitlog.max_offset)
    finally:
        store.close()


def test_bad_frames_drop_the_link_and_store_nothing(tmp_path: Path) -> None:
    data = real_log(tmp_path / "source")
    unit = int.from_bytes(data[:4], "big")
    fake = FakeMaster()
    slave = start_slave(tmp_path / "slave", fake.endpoint)
    try:
        garbage = bytes(range(256)) * 4
        flipped = bytearray(data)
        flipped[unit + 20] ^= 0x40  # the flag field of the second unit
        scripts = [
            frame(0, garbage),  # no unit at all
            frame(0, bytes(flipped)),  # the second unit fails its CRC: only the first stays
            frame(unit + 50, data[unit + 50 :]),  # a gap after the slave's end
            frame(0, b"", size=1 << 30),  # a header no master sends
        ]
        for script in scripts:
            sock, _first = fake.next_link()
            sock.sendall(script)
            assert closed_by_peer(sock), f"slave kept the link after {script[:40]!r}"
            sock.close()
        sock, first = fake.next_link()
        assert first == unit  # it kept the one verified unit of the CRC script
        sock.sendall(frame(first, data[first:]))
        assert struct.unpack(">q", _recv(sock, 8))[0] in (first, len(data))
        wait_until(
            lambda: commitlog_bytes(slave.store_dir)[: len(data)] == data,
            what="the good bytes on the slave",
        )
        sock.close()
    finally:
        slave.stop()
