"""The NameServer process: a remoting server over a route table, plus the expiry scan.

``NameServer`` wires :class:`RouteTable`, :class:`NameServerProcessor` and a
:class:`RemotingServer`: a registering connection that closes removes its brokers at once;
a scan thread every ``scan_interval_ms`` removes brokers silent for longer than their
timeout (capped at ``broker_expiry_ms``) and closes their connections. ``run(argv)`` is the
process entry point (``rmq namesrv start``, ``python -m broker_core.namesrv``): it prints
``READY host:port`` once it accepts connections and stops cleanly on SIGTERM or Ctrl-C.
State is soft: nothing is written to disk, and NameServers never talk to each other.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from broker_core.auth.config import TlsConfig
from broker_core.errors import ConfigError
from broker_core.namesrv.model import DEFAULT_HEARTBEAT_TIMEOUT_MS
from broker_core.namesrv.processor import NameServerProcessor
from broker_core.namesrv.route_table import RouteTable
from broker_core.remoting.channel import Channel
from broker_core.remoting.server import RemotingServer
from broker_core.remoting.tls import server_context
from broker_core.service_thread import ServiceThread, describe

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:9876"
DEFAULT_SCAN_INTERVAL_MS = 5_000


class NameServer:
    """One NameServer: route table, request handlers, expiry scan."""

    def __init__(
        self,
        listen: str = DEFAULT_LISTEN,
        *,
        scan_interval_ms: int = DEFAULT_SCAN_INTERVAL_MS,
        broker_expiry_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context`` (``remoting/tls.py``'s ``server_context``): serve TLS only."""
        if scan_interval_ms <= 0 or broker_expiry_ms <= 0:
            raise ConfigError("scan interval and broker expiry must be positive milliseconds")
        self.table = RouteTable(broker_expiry_ms=broker_expiry_ms)
        self.scan_interval_ms = scan_interval_ms
        handlers = NameServerProcessor(self.table).handlers()
        self._server = RemotingServer(
            listen, handlers, on_close=self._on_channel_closed, ssl_context=ssl_context
        )
        # A failed scan is logged and retried next interval: the scan outlives one bad pass.
        self.scanner = ServiceThread("namesrv-scan", self.scan_once, interval_ms=scan_interval_ms)
        self.address = ""

    def start(self) -> str:
        """Bind, accept, start the scan; returns ``host:port``. Raises ``OSError`` if busy."""
        self.address = self._server.start()
        self.scanner.start()
        log.info(
            "NameServer listening on %s (scan every %d ms, expiry %d ms)",
            self.address,
            self.scan_interval_ms,
            self.table.broker_expiry_ms,
        )
        return self.address

    def stop(self) -> None:
        """Stop the scan and the server (bounded: joins for a few seconds at most)."""
        self.scanner.stop(timeout_ms=5_000)
        self._server.stop()

    def scan_once(self) -> int:
        """Remove expired brokers and close their connections; returns how many went."""
        expired = self.table.scan_expired()
        channels = {c.id: c for c in self._server.channels()}
        for live, channel_id in expired:
            log.warning(
                "broker %s/%s id %d at %s expired (silent since %d)",
                live.cluster,
                live.broker_name,
                live.broker_id,
                live.broker_addr,
                live.last_update_ms,
            )
            channel = channels.get(channel_id) if channel_id is not None else None
            if channel is not None:
                channel.close("broker registration expired")
        return len(expired)

    @property
    def scan_failure(self) -> str:
        """The last scan's error while no scan has succeeded since, ``""`` otherwise."""
        error = self.scanner.last_error
        return "" if error is None else describe(error)

    def _on_channel_closed(self, channel: Channel) -> None:
        for live in self.table.on_channel_closed(channel.id):
            log.warning(
                "broker %s/%s id %d at %s removed: its connection %s closed",
                live.cluster,
                live.broker_name,
                live.broker_id,
                live.broker_addr,
                channel.peer,
            )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m broker_core.namesrv")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT (port 0 = any)")
    parser.add_argument("--scan-interval-ms", type=int, default=DEFAULT_SCAN_INTERVAL_MS)
    parser.add_argument("--broker-expiry-ms", type=int, default=DEFAULT_HEARTBEAT_TIMEOUT_MS)
    parser.add_argument("--tls-cert", default=None, help="PEM certificate: serve TLS")
    parser.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    parser.add_argument("--tls-ca", default=None, help="PEM CA: require client certificates")
    return parser.parse_args(argv)


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The server context ``--tls-cert/--tls-key[/--tls-ca]`` ask for (None: plain TCP)."""
    if args.tls_cert is None and args.tls_key is None:
        if args.tls_ca is not None:
            raise ConfigError("--tls-ca needs --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise ConfigError("give both --tls-cert and --tls-key")
    tls = TlsConfig(
        args.tls_cert,
        args.tls_key,
        client_ca_file=args.tls_ca,
        require_client_cert=args.tls_ca is not None,
    )
    return server_context(tls)


def run(argv: Sequence[str] | None = None) -> int:
    """Run a NameServer in the foreground until SIGTERM/SIGINT; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    server = NameServer(
        args.listen,
        scan_interval_ms=args.scan_interval_ms,
        broker_expiry_ms=args.broker_expiry_ms,
        ssl_context=_tls_context(args),
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    address = server.start()
    print(f"READY {address}", flush=True)
    while not stop.wait(1.0):
        pass
    server.stop()
    print("STOPPED", file=sys.stderr, flush=True)
    return 0
