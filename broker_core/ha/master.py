"""The master's HA port: streams the commitlog to each connected slave (``wire``).

Per connection two threads: a reader takes the slave's reports (its acked offset, see
``in_sync``) and a sender streams frames from where the slave stands. Where the stream
starts is decided by the first report R:

* ``R == 0`` (a new slave with an empty store): the master's first retained segment
  (``min_offset``). Starting there rather than at the last segment (RocketMQ's choice)
  gives the slave the whole retained history, so a failover loses no readable message;
  it costs one full copy when the slave is new.
* ``min_offset <= R <= max_offset``: ``R``.
* anything else (negative, past the master's end, below its retention, going backwards
  later): ReplicationProtocolError; that connection is closed, nothing else is touched.

Idle links get a 0-byte heartbeat frame every heartbeat interval; a slave that neither
reports nor takes bytes for 30 s (a dead host, a long freeze) has its link closed (it
reconnects from its own end when it can); a report of
``METADATA_REQUEST`` gets the config tables (``metadata``) instead of a stream.

Threads: ``after_append`` runs on appending threads (it wakes the senders) and
``wait_replicated`` on the broker's sending threads (sync replication). The accept loop is
a ``ServiceThread`` (``accepter``, in the broker's health); each connection has its own
two plain worker threads, which live as long as the link (``in_sync`` shows the links);
``stop`` closes all.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Callable

from broker_core.errors import OffsetOutOfRangeError, ReplicationProtocolError
from broker_core.ha import wire
from broker_core.ha.in_sync import InSyncSet
from broker_core.service_thread import ServiceThread
from broker_core.store.commitlog import CommitLog

log = logging.getLogger(__name__)
_SILENT_LINK_S = 30.0  # a link whose slave neither reports nor drains this long is closed


class HAMaster:
    """Accepts slaves on ``listen`` and replicates ``commitlog`` to them."""

    def __init__(
        self,
        commitlog: CommitLog,
        listen: str,
        *,
        in_sync: InSyncSet,
        sync: bool,
        timeout_ms: int,
        heartbeat_ms: int,
        metadata: Callable[[], bytes],
    ) -> None:
        self._log = commitlog
        self.in_sync = in_sync
        self.sync = sync
        self._timeout_ms = timeout_ms
        self._heartbeat_s = heartbeat_ms / 1000
        self._metadata = metadata
        self._appended = threading.Condition()
        self._running = True
        self._ids = itertools.count(1)
        self._links: dict[int, socket.socket] = {}
        host, port = wire.parse_endpoint(listen)
        try:
            self._server = socket.create_server((host, port))
        except OSError as exc:
            raise OSError(f"cannot listen for slaves on {listen}: {exc}") from exc
        self.endpoint = f"{host}:{self._server.getsockname()[1]}"
        self.accepter = ServiceThread(
            "ha-accept",
            self._accept,
            interval_ms=0,
            wait_first=False,
            error_backoff_ms=100,
            quiet_exit=lambda _exc: not self._running,  # the port closed by stop()
        )
        self.accepter.start()

    def after_append(self, end_offset: int) -> None:
        """The store's hook after every append: wake the senders."""
        with self._appended:
            self._appended.notify_all()

    def _log_end(self) -> int:
        return self._log.max_offset

    def wait_replicated(self, end_offset: int) -> None:
        """With sync replication, wait until the in-sync slaves acked ``end_offset``."""
        if self.sync:
            self.in_sync.wait(end_offset, self._timeout_ms)

    def stop(self) -> None:
        self._running = False
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        self._server.close()
        self.accepter.stop(timeout_ms=2_000)
        for sock in list(self._links.values()):
            _close(sock)
        with self._appended:
            self._appended.notify_all()

    # ---- connections --------------------------------------------------------------------

    def _accept(self) -> None:
        """One round of the accept loop: take one slave and start its link."""
        sock, peer = self._server.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link_id = next(self._ids)
        threading.Thread(
            target=self._serve,
            args=(link_id, sock, f"{peer[0]}:{peer[1]}"),
            name=f"ha-link-{link_id}",
            daemon=True,
        ).start()

    def _serve(self, link_id: int, sock: socket.socket, name: str) -> None:
        """One slave's life: first report, then reader and sender until either fails."""
        self._links[link_id] = sock
        try:
            sock.settimeout(10 * self._heartbeat_s + 5)
            first = wire.REPORT.unpack(wire.recv_exact(sock, wire.REPORT.size))[0]
            if first == wire.METADATA_REQUEST:
                body = self._metadata()
                sock.sendall(wire.FRAME_HEADER.pack(wire.METADATA_OFFSET, len(body)) + body)
                return
            start = self._start_offset(first)
            log.info("slave %s connected, streaming from offset %d", name, start)
            self.in_sync.join(link_id, name, self._log_end)
            self.in_sync.report(link_id, first, self._log_end)
            sock.settimeout(max(_SILENT_LINK_S, 10 * self._heartbeat_s))  # a dead peer ends
            reader = threading.Thread(
                target=self._read_reports,
                args=(link_id, sock, first),
                name=f"ha-reports-{link_id}",
                daemon=True,
            )
            reader.start()
            self._send(sock, start)
        except (OSError, ConnectionError, ReplicationProtocolError, OffsetOutOfRangeError) as exc:
            if self._running:
                log.warning("HA link to slave %s closed: %s", name, exc)
        finally:
            self.in_sync.leave(link_id)
            self._links.pop(link_id, None)
            _close(sock)

    def _start_offset(self, report: int) -> int:
        low, high = self._log.min_offset, self._log.max_offset
        if report == 0:
            return low
        if report < 0 or report > high:
            raise ReplicationProtocolError(
                f"slave reports offset {report}, this master's log spans [{low}, {high})"
            )
        if report < low:
            raise ReplicationProtocolError(
                f"slave offset {report} is below this master's retained log (starts at {low})"
            )
        return report

    def _read_reports(self, link_id: int, sock: socket.socket, acked: int) -> None:
        """Take reports until the link fails; a bad one closes the link."""
        try:
            while self._running:
                report = wire.REPORT.unpack(wire.recv_exact(sock, wire.REPORT.size))[0]
                if report < acked or report > self._log.max_offset:
                    raise ReplicationProtocolError(
                        f"slave report {report} goes backwards from {acked} or past this "
                        f"master's end {self._log.max_offset}"
                    )
                acked = report
                self.in_sync.report(link_id, report, self._log_end)
        except (OSError, ConnectionError, ReplicationProtocolError) as exc:
            if self._running:
                log.warning("HA link %d: %s", link_id, exc)
        finally:
            self.in_sync.leave(link_id)
            _close(sock)

    def _send(self, sock: socket.socket, offset: int) -> None:
        """Stream frames from ``offset`` forever (heartbeats when idle); raises on failure."""
        log_ = self._log
        while self._running:
            end = log_.max_offset
            if offset < end:
                seg = log_.segment_at(offset)
                local = offset - seg.base_offset
                body = seg.read(
                    local, min(wire.MAX_BATCH_BYTES, seg.wrote_position - local, end - offset)
                )
                sock.sendall(wire.FRAME_HEADER.pack(offset, len(body)) + body)
                offset += len(body)
                continue
            with self._appended:
                if log_.max_offset <= offset and self._running:
                    self._appended.wait(self._heartbeat_s)
            if log_.max_offset <= offset:
                sock.sendall(wire.FRAME_HEADER.pack(offset, 0))


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
