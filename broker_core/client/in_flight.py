"""Several send requests in flight on one channel, message groups kept in order.

Like Kafka's ``max.in.flight.requests.per.connection`` (default 5): :class:`SendWindow`
starts up to ``max_in_flight`` SendMessage calls without waiting for their answers, so
the client encodes the next request while the broker stores the previous ones. Contract:

* at most ``max_in_flight`` requests are outstanding; submitting one more first finishes
  the oldest;
* requests are finished (answer checked, receipts made) in the order they were submitted;
* **per-queue order for message groups**: a request carrying a message group that an
  outstanding request also carries is only started once that request (and every one
  before it) is finished, retries included. Requests without groups overlap freely, so
  the broker may store them in any order, as Kafka with in-flight > 1 and no idempotence;
* a request that fails retriably is sent again (synchronously, with the attempts the
  client's retry policy has left: ``max_attempts`` counts the first) when it is finished;
  a failure is kept and raised by its :class:`PendingSend` (and by
  :meth:`SendWindow.flush`), never lost.

One thread per window (the client's calling thread); not thread-safe.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client.errors import check, transport_error
from broker_core.client.model import SendReceipt
from broker_core.errors import InvalidArgumentError, RocketMQError

DEFAULT_MAX_IN_FLIGHT: Final = 5
# What a send answers: a SendMessageResponse, or a SendBulk frame (bytes).
Answer = TypeVar("Answer", service_pb2.SendMessageResponse, bytes)
_OK_CODES: Final = frozenset({int(pb.Code.OK), int(pb.Code.MULTIPLE_RESULTS)})


def receipts_of(
    response: service_pb2.SendMessageResponse, count: int, request: bytes = b""
) -> list[SendReceipt]:
    """One receipt per entry; the first entry whose status is not OK raises its error.

    Apache RocketMQ's proxy (5.5.0) stores a SendMessage of several messages as one
    MessageBatch in one queue and answers one entry for it (the first message's offset,
    an offset-style id): the receipts are then made from ``request`` (each message's own
    id) at consecutive offsets."""
    check(response.status)
    entries = response.entries
    if len(entries) == 1 and count > 1 and request:
        return _batch_receipts(entries[0], request, count)
    if len(entries) != count:
        raise RocketMQError(f"broker answered {len(entries)} entries for {count} messages")
    if not {entry.status.code for entry in entries} <= _OK_CODES:
        for entry in entries:
            check(entry.status)
    return [SendReceipt(e.message_id, e.offset, e.transaction_id, e.recall_handle) for e in entries]


def _batch_receipts(entry: Any, request: bytes, count: int) -> list[SendReceipt]:
    """``count`` receipts from one entry answering a whole batch (see :func:`receipts_of`)."""
    check(entry.status)
    messages = service_pb2.SendMessageRequest.FromString(request).messages
    if len(messages) != count:
        raise RocketMQError(f"broker answered 1 entry for {count} messages")
    return [
        SendReceipt(m.system_properties.message_id, entry.offset + i, "", "")
        for i, m in enumerate(messages)
    ]


@dataclass
class PendingSend(Generic[Answer]):
    """One submitted request: its receipts once finished, or its error."""

    count: int
    groups: frozenset[str]
    future: grpc.Future | None  # of the first attempt; None once finished
    decode: Callable[[Answer], list[SendReceipt]]  # the receipts of an answer, or raises
    # sends again synchronously with the attempts left, given the first attempt's error
    # (raised again when none are left)
    resend: Callable[[RocketMQError], list[SendReceipt]]
    window: SendWindow
    receipts: list[SendReceipt] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.future is None

    def result(self) -> list[SendReceipt]:
        """The receipts, in message order (finishing this and every earlier request)."""
        self.window.finish_through(self)
        if self.error is not None:
            raise self.error
        return self.receipts

    def _finish(self) -> None:
        future, self.future = self.future, None
        assert future is not None, "finished twice"  # the window finishes each once
        try:
            try:
                try:
                    self.receipts = self.decode(future.result())
                except grpc.RpcError as exc:
                    raise transport_error(exc, self.window.endpoint(), "send") from None
            except RocketMQError as exc:
                if not exc.retriable:
                    raise
                self.receipts = self.resend(exc)
        except RocketMQError as exc:
            self.error = exc


class SendWindow:
    """The requests in flight of one client (see the module docstring)."""

    def __init__(self, max_in_flight: int, endpoint: Callable[[], str]) -> None:
        if max_in_flight < 1:
            raise InvalidArgumentError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.endpoint = endpoint  # named in transport errors
        self.open: deque[PendingSend[Any]] = deque()

    def submit(
        self,
        start: Callable[[], grpc.Future],
        decode: Callable[[Answer], list[SendReceipt]],
        resend: Callable[[RocketMQError], list[SendReceipt]],
        count: int,
        groups: frozenset[str],
    ) -> PendingSend[Answer]:
        """Start a request (``start()`` returns its grpc future) within the window's rules."""
        if groups:
            clashing = [p for p in self.open if p.groups & groups]
            if clashing:
                self.finish_through(clashing[-1])
        while len(self.open) >= self.max_in_flight:
            self._finish_oldest()
        pending = PendingSend(count, groups, start(), decode, resend, self)
        self.open.append(pending)
        return pending

    def finished(self, receipts: list[SendReceipt]) -> PendingSend[Any]:
        """A request already answered (a cluster client's, sent synchronously)."""
        return PendingSend(
            len(receipts), frozenset(), None, lambda _: receipts, lambda _: receipts, self, receipts
        )

    def finish_through(self, pending: PendingSend) -> None:
        """Finish every outstanding request up to and including ``pending``."""
        while not pending.done and self.open:
            self._finish_oldest()

    def flush(self) -> None:
        """Finish every outstanding request; raise the first error among them."""
        first: BaseException | None = None
        while self.open:
            pending = self._finish_oldest()
            first = first or pending.error
        if first is not None:
            raise first

    def _finish_oldest(self) -> PendingSend:
        pending = self.open.popleft()
        pending._finish()
        return pending
