"""Serving the console: uvicorn on a socket we bind first, so a busy port is an error at
once and ``port 0`` gets a free port whose URL we know.

:func:`start_console` runs it on a background thread (``rmq cluster up``, ``./dev demo``,
the tests); ``rmq console`` runs it in the foreground with :meth:`ConsoleServer.run`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import uvicorn

from broker_core.address import parse_host_port
from broker_core.client import RocketMQClient
from broker_core.client.env import client_settings
from broker_core.console.app import create_app
from broker_core.console.sessions import Sessions
from broker_core.errors import InvalidArgumentError, ListenError

DEFAULT_LISTEN: Final = "127.0.0.1:8088"
VENDOR_DIR: Final = Path(__file__).parent / "static" / "vendor"
START_TIMEOUT_S: Final = 10.0


def client_factory(endpoints: str | None, namesrv: str | None) -> Sessions:
    """Sessions whose clients reach ``endpoints`` (one broker) or ``namesrv`` (a cluster),
    with TLS as ``$RMQ_TLS``/``$RMQ_CA_FILE`` say; the keys are the logged-in user's."""
    if (endpoints is None) == (namesrv is None):
        raise InvalidArgumentError("give exactly one of endpoints and namesrv")
    tls = {k: v for k, v in client_settings().items() if k not in ("access_key", "secret_key")}

    def make(access_key: str | None, secret_key: str | None) -> RocketMQClient:
        return RocketMQClient(
            endpoints,
            namesrv=namesrv,
            timeout_s=10.0,
            max_attempts=2,
            access_key=access_key,
            secret_key=secret_key,
            **tls,
        )

    return Sessions(make)


class _Server(uvicorn.Server):
    """uvicorn's server without its signal capture (which re-raises the signal after the
    shutdown): :meth:`ConsoleServer.run` installs handlers that just stop it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ConsoleServer:
    """One console listening on ``listen`` (``HOST:PORT``; port 0 picks a free one)."""

    def __init__(
        self, listen: str, *, endpoints: str | None = None, namesrv: str | None = None
    ) -> None:
        host, port = parse_host_port(listen, what="--listen", allow_any_port=True)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
            self._socket.listen(128)  # connections wait in the backlog until uvicorn runs
        except OSError as exc:
            self._socket.close()
            raise ListenError(f"console cannot listen on {listen}: {exc.strerror}") from None
        self.host, self.port = host, self._socket.getsockname()[1]
        vendor = Path(os.environ.get("RMQ_CONSOLE_VENDOR", VENDOR_DIR))
        app = create_app(client_factory(endpoints, namesrv), vendor_dir=vendor)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self._server = _Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def run(self) -> None:
        """Serve in this (main) thread until SIGINT or SIGTERM, then stop cleanly."""

        def stop(signum: int, frame: object) -> None:
            self._server.should_exit = True

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stop)
        self._server.run(sockets=[self._socket])
        self._socket.close()

    def start(self) -> ConsoleServer:
        """Serve on a daemon thread; returns once the server accepts connections."""
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="console",
            daemon=True,
        )
        self._thread.start()
        pause = threading.Event()  # uvicorn has no "started" event to wait on
        while not self._server.started and self._thread.is_alive():
            pause.wait(0.02)
        if not self._server.started:
            raise ListenError(f"console on {self.url} did not start")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(START_TIMEOUT_S)
        self._socket.close()


def start_console(
    listen: str = "127.0.0.1:0", *, endpoints: str | None = None, namesrv: str | None = None
) -> ConsoleServer:
    """A console serving on a background thread (for ``rmq cluster up`` and ``./dev
    demo``): ``start_console(namesrv="127.0.0.1:9876").url``; ``.stop()`` ends it."""
    return ConsoleServer(listen, endpoints=endpoints, namesrv=namesrv).start()
