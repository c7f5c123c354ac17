"""The slave's link to its master's HA port (``wire``): store the stream, report progress.

One thread connects, reports the store's commitlog end, then stores each frame through
``MessageStore.append_replica`` (same offsets, every unit verified; a unit cut by a frame
boundary waits in ``pending`` for the rest) and reports the new end after progress and
every heartbeat interval. Silence from the master for ``dead_after`` heartbeats, a closed
connection or a protocol error (a gap, an overlap that differs, a unit that does not
verify, a bad header) drops the link: nothing after the last whole verified unit is kept,
and it reconnects from its log's end after a short pause.

A second thread copies the master's config tables every ``metadata_interval_ms``
(``metadata``).

Threads: ``start`` and ``stop`` from the owner; the rest runs on the two
``ServiceThread``s (``ha-slave``, ``ha-metadata``, listed by ``threads()`` for health). A
dropped link or a failed copy is expected now and then: it is logged, kept in
``last_error`` and retried, and the thread stays "ok"; a thread that dies shows "failed".
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

from broker_core.errors import ReplicationProtocolError, RocketMQError
from broker_core.ha import wire
from broker_core.ha.ports import ReplicaLog
from broker_core.service_thread import ServiceThread

log = logging.getLogger(__name__)
_RECONNECT_S = 0.5
_DEAD_AFTER_HEARTBEATS = 5


class HASlave:
    """Replicates the master at ``master`` into ``store``."""

    def __init__(
        self,
        store: ReplicaLog,
        master: str,
        *,
        heartbeat_ms: int,
        metadata_interval_ms: int,
        apply_metadata: Callable[[bytes], None],
    ) -> None:
        self._store = store
        self.master = master
        self._heartbeat_s = heartbeat_ms / 1000
        self._apply_metadata = apply_metadata
        self._sock: socket.socket | None = None
        self.connected = threading.Event()
        self.last_error = ""
        self.local_address = ""  # this end of the HA link, as the master names it
        self._link = ServiceThread(
            "ha-slave", self._link_round, interval_ms=_RECONNECT_S * 1000, wait_first=False
        )
        self._copier = ServiceThread(
            "ha-metadata", self._copy_round, interval_ms=metadata_interval_ms, wait_first=False
        )

    def threads(self) -> list[ServiceThread]:
        return [self._link, self._copier]

    def start(self) -> None:
        for thread in self.threads():
            thread.start()

    def halt(self, timeout_s: float = 2.0) -> None:
        """Stop storing the stream (the metadata thread is left to end on its own)."""
        self._copier.request_stop()
        self._stop_link(timeout_s)

    def stop(self) -> None:
        self._copier.request_stop()
        self._stop_link(10)
        self._copier.stop()

    def _stop_link(self, timeout_s: float) -> None:
        self._link.request_stop()  # before the socket closes: the loop then ends quietly
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._link.stop(timeout_ms=timeout_s * 1000)

    # ---- the commitlog stream ------------------------------------------------------------

    def _link_round(self) -> None:
        """One connection's life; a dropped link is logged and the thread reconnects."""
        try:
            self._replicate_once()
        except (OSError, ConnectionError, RocketMQError) as exc:
            if not self._link.stopping:
                self.last_error = str(exc)
                log.warning("HA link to master %s dropped: %s", self.master, exc)
        except Exception as exc:  # a bug must not end replication for good
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("HA link to master %s failed", self.master)
        finally:
            self.connected.clear()

    def _replicate_once(self) -> None:
        host, port = wire.parse_endpoint(self.master)
        with socket.create_connection((host, port), timeout=5) as sock:
            self._sock = sock
            self.local_address = "{}:{}".format(*sock.getsockname()[:2])
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(self._heartbeat_s)
            reported = self._report(sock)
            self.connected.set()
            log.info("replicating from master %s, from offset %d", self.master, reported)
            reader = wire.FrameReader(sock, wire.MAX_BATCH_BYTES * 8)
            stream = _Pending(self._store)
            last_report = last_heard = time.monotonic()
            silent_s = _DEAD_AFTER_HEARTBEATS * self._heartbeat_s + 1
            while not self._link.stopping:
                frame = reader.next_frame()
                now = time.monotonic()
                if frame is not None:
                    last_heard = now
                    stream.store(*frame)
                elif now - last_heard > silent_s:
                    raise ConnectionError(f"master {self.master} silent for {silent_s:.1f} s")
                end = self._store.commitlog.max_offset
                if end != reported or now - last_report >= self._heartbeat_s:
                    reported = self._report(sock)
                    last_report = now

    def _report(self, sock: socket.socket) -> int:
        offset = self._store.commitlog.max_offset
        sock.sendall(wire.REPORT.pack(offset))
        return offset

    # ---- config tables -------------------------------------------------------------------

    def _copy_round(self) -> None:
        try:
            self._apply_metadata(self.fetch_metadata())
        except (OSError, ConnectionError, RocketMQError, ValueError) as exc:
            if not self._copier.stopping:
                log.warning("copying config tables from master %s failed: %s", self.master, exc)

    def fetch_metadata(self) -> bytes:
        """The master's config tables (one METADATA_REQUEST round trip)."""
        host, port = wire.parse_endpoint(self.master)
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(wire.REPORT.pack(wire.METADATA_REQUEST))
            offset, size = wire.FRAME_HEADER.unpack(wire.recv_exact(sock, wire.FRAME_HEADER.size))
            if offset != wire.METADATA_OFFSET or not 0 <= size <= wire.MAX_METADATA_BYTES:
                raise ReplicationProtocolError(f"bad metadata frame ({offset}, {size})")
            return wire.recv_exact(sock, size)


class _Pending:
    """The stream's bytes not yet stored: a unit cut by a frame boundary waits here."""

    def __init__(self, store: ReplicaLog) -> None:
        self._store = store
        self._bytes = bytearray()
        self._at = -1  # global offset of the first pending byte

    def store(self, offset: int, body: bytes) -> None:
        """Add a frame and store every whole unit; raises on a frame out of sequence."""
        if not body:
            return  # a heartbeat
        if self._bytes and offset != self._at + len(self._bytes):
            raise ReplicationProtocolError(
                f"frame at {offset} does not follow the stream at {self._at + len(self._bytes)}"
            )
        if not self._bytes:
            self._at = offset
        self._bytes += body
        done = self._store.append_replica(self._at, bytes(self._bytes))
        del self._bytes[:done]
        self._at += done
        if len(self._bytes) > self._store.commitlog.segment_size:
            raise ReplicationProtocolError("the stream holds a unit larger than a segment")
