"""Load for network-fault scenarios, recorded in a ``tests.history.History``.

``HistoryLoad`` runs sender threads; each sends numbered bodies (``<prefix><thread>-<n>``),
one attempt per body, to one broker of the group at a time, moving to the next broker
after a failure (as ``FailoverSender`` does). A failed body is never sent again: its
outcome is *unknown* (a replication timeout or a fenced master may have stored it). Every
failure must be one a failover explains (``send_loop.restart_explains``), else the loop
ends and ``stop`` fails. ``acked_by`` keeps, per acknowledged body, the broker's index and
the time the send was invoked.

``read_all(endpoint, topic, history)`` reads every stored message back into the history.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from broker_core.client import RocketMQClient
from tests.chaos.load import read_back
from tests.history import History
from tests.send_loop import LoopThreads, OfficialProducer, UnexplainedFailure, restart_explains

RETRY_PAUSE_S = 0.02


class Sender(Protocol):
    def send(self, topic: str, body: bytes) -> object: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Landed:
    body: str
    broker: int  # index into the endpoints
    invoked_s: float


@dataclass
class HistoryLoad:
    endpoints: list[str]
    topic: str
    history: History
    senders: int = 2
    prefix: str = "m"
    timeout_s: float = 3.0
    namesrv: str = ""  # set: one cluster client routed by this NameServer instead
    official: bool = False  # one official rocketmq Producer over every endpoint instead
    acked_by: list[Landed] = field(default_factory=list)
    failures: list[tuple[float, Exception]] = field(default_factory=list)
    _threads: LoopThreads | None = None

    def start(self) -> HistoryLoad:
        self._threads = LoopThreads(
            (f"sender-{i}", lambda i=i: self._run(f"{self.prefix}{i}"))  # type: ignore[misc]
            for i in range(self.senders)
        )
        self._threads.start()
        return self

    def _run(self, prefix: str) -> None:
        assert self._threads is not None
        clients = self._clients()
        at, n = 0, 0
        try:
            while not self._threads.stop.is_set():
                body = f"{prefix}-{n:08d}"
                n += 1
                op = self.history.invoke(body)
                try:
                    clients[at].send(self.topic, body.encode())
                except Exception as exc:
                    self.history.unknown(op, exc)
                    self._failed(exc)
                    at = (at + 1) % len(clients)
                    time.sleep(RETRY_PAUSE_S)
                    continue
                self.history.ok(op)
                self.acked_by.append(Landed(body, at, op.invoked_at))
        finally:
            for client in clients:
                client.close()

    def _clients(self) -> list[Sender]:
        if self.official:
            return [OfficialProducer(";".join(self.endpoints), self.topic)]
        if self.namesrv:
            return [RocketMQClient(namesrv=self.namesrv, max_attempts=1, timeout_s=self.timeout_s)]
        return [RocketMQClient(e, max_attempts=1, timeout_s=self.timeout_s) for e in self.endpoints]

    def _failed(self, exc: Exception) -> None:
        self.failures.append((time.monotonic(), exc))
        if not restart_explains(exc, failover=True):
            raise UnexplainedFailure(f"a send failed unexplained by a failover: {exc!r}")

    def acks_after(self, t: float) -> int:
        return sum(1 for a in list(self.acked_by) if a.invoked_s > t)

    def wait_acks_after(self, t: float, count: int, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while self.acks_after(t) < count:
            assert self._threads is not None and not self._threads.errors, self._threads.errors
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
            time.sleep(0.05)

    def stop(self) -> None:
        assert self._threads is not None
        self._threads.join(60)


def read_all(endpoint: str, topic: str, history: History) -> int:
    """Every message of ``topic`` at ``endpoint`` recorded as a read; returns the count."""
    with RocketMQClient(endpoint, timeout_s=30) as reader:
        messages = read_back(reader, topic)
    for message in messages:
        history.read(message.body.decode(), f"q{message.queue_id}")
    return len(messages)
