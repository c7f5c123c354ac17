"""Coalescing of single sends made concurrently by several threads of one client.

Kafka's producer puts records that many threads send at about the same time into one
request (``linger.ms``, ``batch.size``). :class:`Coalescer` does that for
``RocketMQClient.send`` with no linger: per topic, a send goes out at once when no request
of that topic is in flight; sends that arrive while one is in flight wait and together
form the next request (at most ``max_batch`` messages and, unless one message alone is
larger, ``max_batch_bytes`` of bodies), sent by the first of them as soon as the request
in flight is answered. Contract:

* **each caller gets its own receipt or its own error.** A request refused for a reason
  that is not retriable (e.g. one message too large) is sent again message by message, so
  one caller's bad message never fails another's good one; a retriable failure that
  outlasts the retries (broker unreachable, busy) is every caller's error.
* **order per thread**: a thread waits for its receipt before its next send, so its
  messages are stored in the order it sent them (one request at a time per topic).
* the caller's thread does the sending (no background thread); a process that did not
  make the coalescer (fork, unpickled copy) starts with an empty one.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from broker_core.client.model import OutgoingMessage, SendReceipt
from broker_core.errors import RocketMQError

DEFAULT_MAX_BATCH: Final = 256
DEFAULT_MAX_BATCH_BYTES: Final = 1 << 20

# (topic, messages) → their receipts in order, or raises: one blocking request, retried.
SendNow = Callable[[str, list[OutgoingMessage]], list[SendReceipt]]


@dataclass(eq=False)
class _Waiter:
    """One caller's message and, once its request is answered, its outcome."""

    message: OutgoingMessage
    done: threading.Event = field(default_factory=threading.Event)
    receipt: SendReceipt | None = None
    error: BaseException | None = None
    batch: list[_Waiter] | None = None  # set when this caller is to send the next request


@dataclass
class _Lane:
    """One topic's state: whether a request is in flight, and the sends waiting for it."""

    busy: bool = False
    waiting: list[_Waiter] = field(default_factory=list)


def _copies(exc: BaseException, count: int) -> list[BaseException]:
    """``exc`` and ``count - 1`` copies of it: each caller raises its own (tracebacks of
    one exception raised in several threads would mix); ``exc`` itself when it cannot be
    copied."""
    try:
        return [exc] + [copy.copy(exc) for _ in range(count - 1)]
    except Exception:
        return [exc] * count


class Coalescer:
    """Single sends of one client, coalesced per topic (see the module docstring)."""

    def __init__(
        self, max_batch: int = DEFAULT_MAX_BATCH, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    ) -> None:
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self._lock = threading.Lock()
        self._lanes: dict[str, _Lane] = {}
        self._pid = os.getpid()

    def __reduce__(self) -> tuple[Any, ...]:
        return (Coalescer, (self.max_batch, self.max_batch_bytes))  # a copy elsewhere starts empty

    def send(self, topic: str, message: OutgoingMessage, send_now: SendNow) -> SendReceipt:
        """Send ``message`` alone or with the sends waiting beside it; its receipt."""
        me = _Waiter(message)
        if self._pid != os.getpid():  # forked: the parent's lanes (and lock) mean nothing
            self._lock, self._lanes, self._pid = threading.Lock(), {}, os.getpid()
        with self._lock:
            lane = self._lanes.setdefault(topic, _Lane())
            if lane.busy:
                lane.waiting.append(me)
            else:
                lane.busy = True
                me.batch = [me]
        if me.batch is None:
            me.done.wait()
        if me.batch is not None:  # this caller sends a request, then passes the turn on
            try:
                self._run(topic, me.batch, send_now)
            finally:
                self._pass_on(lane)
        if me.error is not None:
            raise me.error
        assert me.receipt is not None
        return me.receipt

    def _pass_on(self, lane: _Lane) -> None:
        """The request in flight is answered: the first waiter sends the next one."""
        with self._lock:
            if not lane.waiting:
                lane.busy = False
                return
            taken = self._next_batch_size(lane.waiting)
            batch, lane.waiting = lane.waiting[:taken], lane.waiting[taken:]
        batch[0].batch = batch
        batch[0].done.set()

    def _next_batch_size(self, waiting: list[_Waiter]) -> int:
        """How many of the first ``waiting`` the next request takes (at least one)."""
        size = total = 0
        for waiter in waiting[: self.max_batch]:
            total += len(waiter.message.body)
            if size and total > self.max_batch_bytes:
                break
            size += 1
        return size

    def _run(self, topic: str, batch: list[_Waiter], send_now: SendNow) -> None:
        """Send ``batch`` and hand each waiter its outcome (wakes all but the first's
        sender, which reads its own)."""
        try:
            receipts = send_now(topic, [w.message for w in batch])
        except RocketMQError as exc:
            if exc.retriable or len(batch) == 1:
                self._settle(batch, _copies(exc, len(batch)))
            else:  # one message may be bad: each on its own, for its own outcome
                self._settle(batch, [self._alone(topic, w, send_now) for w in batch])
            return
        except BaseException as exc:
            self._settle(batch, _copies(exc, len(batch)))
            raise
        self._settle(batch, receipts)

    @staticmethod
    def _alone(topic: str, waiter: _Waiter, send_now: SendNow) -> SendReceipt | BaseException:
        try:
            return send_now(topic, [waiter.message])[0]
        except RocketMQError as exc:
            return exc

    @staticmethod
    def _settle(batch: list[_Waiter], outcomes: list[Any]) -> None:
        for waiter, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                waiter.error = outcome
            else:
                waiter.receipt = outcome
            waiter.done.set()
