"""Producers on threads for the kill and failover tests: numbered sends until stopped.

* :class:`LoopThreads` runs loops on named threads that share one ``stop`` event; an
  exception a loop does not handle itself is kept, not lost in its thread, and fails
  :meth:`LoopThreads.join` (as does a thread that does not end).
* :func:`send_numbered` sends ``<prefix>-<n:08d>`` bodies one at a time until stopped and
  reports each acknowledged one (with the time its send began) or each failure. A body
  whose send failed is never reused: the broker may have stored it anyway.
* :class:`SendLoop` is both together for one or more senders (``FailoverSender``, or
  :class:`OfficialProducer`), keeping every acknowledgement as an :class:`Acked` (with
  where the sender says it landed) and every body whose send failed.

Every failure must be one a broker going away explains (:func:`restart_explains`: the
connection refused or reset, the broker unavailable or not answering in time, a retriable
code); any other error (a programming error, ``INTERNAL_ERROR`` from a live broker) ends
the loop and fails :meth:`LoopThreads.join`. When in time they may occur is the test's to
check (``SendLoop.failures`` keeps each with the time it was raised).

Times are ``time.monotonic()`` seconds. Safe to read ``acked`` while the loop runs.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.v5.exception import (
    ForbiddenException,
    ProxyTimeoutException,
    TooManyRequestsException,
)

from broker_core.errors import NotMasterError, PermissionDeniedError, RocketMQError

Result = TypeVar("Result")
Where = TypeVar("Where")  # where a sender says a body landed (an endpoint index, a group name)
Where_co = TypeVar("Where_co", covariant=True)


# what a killed, restarting or frozen broker does to a call in flight or a new one
RESTART_GRPC_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
RESTART_OS_ERRORS = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, TimeoutError)


def restart_explains(exc: BaseException, *, failover: bool = False) -> bool:
    """Whether a broker being killed, restarting (or, with ``failover``, changing role:
    a write that reaches a broker that just became a slave) explains ``exc``."""
    if isinstance(exc, RocketMQError):
        return exc.retriable or (failover and _not_master(exc))
    if isinstance(exc, grpc.aio.AioRpcError | grpc.Call):  # the official client's errors
        return exc.code() in RESTART_GRPC_CODES
    if isinstance(exc, ProxyTimeoutException | TooManyRequestsException):  # retriable codes
        return True
    if isinstance(exc, ForbiddenException):
        return failover and " is a slave" in str(exc)
    return isinstance(exc, RESTART_OS_ERRORS)


def _not_master(exc: RocketMQError) -> bool:
    """A write refused by a slave: ``NotMasterError`` in process; over gRPC it is FORBIDDEN,
    which a client maps to ``PermissionDeniedError`` (no code of its own), so the broker's
    words tell it from a denied permission."""
    if isinstance(exc, NotMasterError):
        return True
    return isinstance(exc, PermissionDeniedError) and " is a slave" in str(exc)


class UnexplainedFailure(AssertionError):
    """A send failed in a way no broker restart explains."""


class LoopThreads:
    """Named loops on threads, until :attr:`stop` is set."""

    def __init__(self, loops: Iterable[tuple[str, Callable[[], None]]]) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._guard, args=(run,), name=name, daemon=True)
            for name, run in loops
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self, timeout_s: float = 60) -> None:
        """Set ``stop`` and wait for every loop; fails if one hung or raised."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout_s)
        hung = [t.name for t in self.threads if t.is_alive()]
        assert not hung, f"loop threads hung: {hung}"
        assert not self.errors, f"loop threads failed: {self.errors!r}"

    def _guard(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as exc:  # reported by join(), not lost in a thread
            self.errors.append(exc)


def send_numbered(
    stop: threading.Event,
    prefix: bytes,
    send: Callable[[bytes], Result],
    on_ack: Callable[[bytes, float, Result], None],
    on_failure: Callable[[Exception], None],
    retry_pause_s: float = 0.0,
) -> None:
    """Send ``<prefix>-<n:08d>`` for n = 0, 1, … until ``stop`` is set.

    ``send(body)`` returns once the body is acknowledged; then ``on_ack(body, started_s,
    result)``. When it raises, ``on_failure(exc)`` and a pause of ``retry_pause_s``.
    """
    n = 0
    while not stop.is_set():
        body = b"%s-%08d" % (prefix, n)
        n += 1
        started_s = time.monotonic()
        try:
            result = send(body)
        except Exception as exc:  # not acknowledged: may or may not be stored
            on_failure(exc)
            time.sleep(retry_pause_s)
            continue
        on_ack(body, started_s, result)


class Sender(Protocol[Where_co]):
    def send(self, topic: str, body: bytes) -> Where_co:
        """Send until acknowledged; returns where it landed (``FailoverSender``: the index of
        the endpoint that acknowledged; :class:`OfficialProducer`: the broker group)."""

    def close(self) -> None: ...


class OfficialProducer:
    """The official ``rocketmq`` Producer as a :class:`Sender`: one message per request; it
    finds the master among ``endpoints`` (``"h:p1;h:p2"``) itself, and ``send`` returns the
    broker group (broker name) of the queue the client chose."""

    def __init__(self, endpoints: str, topic: str) -> None:
        self._producer = Producer(ClientConfiguration(endpoints, Credentials()), (topic,))
        self._producer.startup()

    def send(self, topic: str, body: bytes) -> str:
        message = Message()
        message.topic, message.body = topic, body
        receipt = self._producer.send(message)
        return str(receipt.message_queue.message_queue0().broker.name)

    def close(self) -> None:
        self._producer.shutdown()


@dataclass(frozen=True, slots=True)
class Acked(Generic[Where]):
    body: bytes
    started_s: float  # when its send began
    acked_s: float  # when its send returned
    by: Where  # where the sender says it landed (see Sender.send)


class SendLoop(Generic[Where]):
    """``senders`` threads, each with its own ``new_sender()``, send numbered bodies
    (``<prefix><thread>-<n:08d>``) to ``topic`` until :meth:`stop`. ``failed`` holds every
    body whose send raised: never sent again, it may be stored anyway (even twice, by a
    client's own retries)."""

    def __init__(
        self,
        new_sender: Callable[[], Sender[Where]],
        topic: str,
        prefix: bytes,
        *,
        senders: int = 1,
        retry_pause_s: float = 0.0,
    ) -> None:
        self.acked: list[Acked[Where]] = []
        self.errors: list[str] = []  # send failures, most recent last
        self.failures: list[tuple[float, Exception]] = []  # (when raised, what)
        self.failed: set[bytes] = set()
        self._new_sender, self._topic, self._pause_s = new_sender, topic, retry_pause_s
        self._threads = LoopThreads(
            (f"sender-{i}", functools.partial(self._run, prefix + b"%d" % i))
            for i in range(senders)
        )
        self._threads.start()

    def _run(self, prefix: bytes) -> None:
        sender = self._new_sender()

        def send(body: bytes) -> Where:
            try:
                return sender.send(self._topic, body)
            except Exception:
                self.failed.add(body)
                raise

        def on_ack(body: bytes, started_s: float, by: Where) -> None:
            self.acked.append(Acked(body, started_s, time.monotonic(), by))

        def on_failure(exc: Exception) -> None:
            self.errors.append(repr(exc)[:200])
            self.failures.append((time.monotonic(), exc))
            if not restart_explains(exc, failover=True):
                raise UnexplainedFailure(f"a send failed unexplained by a failover: {exc!r}")

        try:
            send_numbered(self._threads.stop, prefix, send, on_ack, on_failure, self._pause_s)
        finally:
            sender.close()

    def bodies(self) -> list[bytes]:
        return [a.body for a in list(self.acked)]

    def acked_at(self) -> dict[bytes, float]:
        """Each acknowledged body with the time its send returned."""
        return {a.body: a.acked_s for a in list(self.acked)}

    def acks_after(self, t: float) -> int:
        """How many acknowledgements arrived after ``t``."""
        return len(self.acked_after(t))

    def acked_after(self, t: float) -> list[Acked[Where]]:
        """Acknowledgements that arrived after ``t``."""
        return [a for a in list(self.acked) if a.acked_s > t]

    def started_after(self, t: float) -> list[Acked[Where]]:
        """Acknowledged sends that began after ``t``."""
        return [a for a in list(self.acked) if a.started_s > t]

    def stop(self, timeout_s: float = 90) -> list[bytes]:
        """Stop every sender (fails if one hung or broke); returns the acknowledged bodies."""
        self._threads.join(timeout_s)
        return self.bodies()
