"""The asynchronous sends of :class:`~broker_core.client.RocketMQClient` (a mixin).

``send_batch_async``/``send_columns_async`` put a request in the client's window of
requests in flight (:mod:`broker_core.client.in_flight`); plain messages go by SendBulk
when the broker offers it (:mod:`broker_core.client.bulk`), others by SendMessage (so do
all messages to an endpoint without our services, :mod:`broker_core.client.standard`).
The synchronous ``send_batch``/``send_columns`` are these plus ``result()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import bulk, standard, wire
from broker_core.client.in_flight import PendingSend, SendWindow, receipts_of
from broker_core.client.model import OutgoingMessage, SendReceipt
from broker_core.errors import (
    InvalidArgumentError,
    RocketMQError,
    ServiceNotOfferedError,
    UnsupportedError,
)

T = TypeVar("T")


class AsyncSends(ABC):
    """What the client provides, and the sends built on it."""

    cluster: Any
    endpoint: str
    namespace: str
    timeout_s: float
    bulk: bool
    _bulk_offered: bool | None
    _window: SendWindow
    _raw_methods: dict[str, grpc.UnaryUnaryMultiCallable]

    @abstractmethod
    def _channel_for_process(self) -> grpc.Channel: ...

    @abstractmethod
    def _metadata(self) -> list[tuple[str, str]]: ...

    @abstractmethod
    def _raw_method(self, method: str) -> grpc.UnaryUnaryMultiCallable: ...

    max_attempts: int

    @abstractmethod
    def _retrying(
        self, what: str, attempt: Callable[[], T], *, attempts: int | None = None
    ) -> T: ...

    def _again(self, first: RocketMQError, what: str, attempt: Callable[[], T]) -> T:
        """A request's retries after its first attempt failed with ``first`` (retriable):
        ``max_attempts - 1`` more attempts, or ``first`` raised when there are none."""
        if self.max_attempts < 2:
            raise first
        return self._retrying(what, attempt, attempts=self.max_attempts - 1)

    @abstractmethod
    def call(
        self, method: str, request: ProtoMessage | bytes, *, timeout_s: float | None = None
    ) -> ProtoMessage: ...

    @abstractmethod
    def send_batch(self, topic: str, messages: Iterable[Any]) -> list[SendReceipt]: ...

    send_columns: Callable[..., list[SendReceipt]]  # the client's (columns as keywords)

    def send_batch_async(self, topic: str, messages: Iterable[Any]) -> PendingSend:
        """:meth:`send_batch` without waiting for the answer: the request joins the
        requests in flight (at most ``max_in_flight``; message groups kept in order, see
        :mod:`broker_core.client.in_flight`). ``result()`` gives the receipts or raises;
        :meth:`flush` waits for every request in flight."""
        items = list(messages)
        groups = [None if type(m) is bytes else OutgoingMessage.of(m).message_group for m in items]
        if self.cluster is not None:
            return self._window.finished(self.send_batch(topic, items))
        if items and not any(groups) and all(type(m) is bytes for m in items):
            return self.send_columns_async(topic, items)
        request, count = wire.encode_messages(topic, items, namespace=self.namespace)
        return self._submit(request, count, groups)

    def send_columns_async(
        self, topic: str, bodies: Sequence[bytes], *, receipts: bool = True, **columns: Any
    ) -> PendingSend:
        """:meth:`send_columns` without waiting (see :meth:`send_batch_async`).

        ``receipts=False`` (a sender that only needs to know the batch was stored, as the
        Spark sink): a SendBulk request's answer is still checked (status, one offset per
        message) but ``result()`` gives ``[]``, and no message id string is made."""
        if self.cluster is not None:
            return self._window.finished(self.send_columns(topic, bodies, **columns))
        plain = not any(columns.get("message_groups") or ()) and not any(
            columns.get("delivery_ms") or ()
        )
        offered = self._bulk_offered is not False and not standard.is_standard(self.endpoint)
        if plain and self.bulk and not self.namespace and offered:
            pending = self._submit_bulk(
                topic,
                bodies,
                want_receipts=receipts,
                **{name: columns.get(name) for name in ("tags", "keys", "properties")},
            )
            if pending is not None:
                return pending
        request = wire.encode_send_request(topic, bodies, namespace=self.namespace, **columns)
        return self._submit(request, len(bodies), columns.get("message_groups"))

    def flush(self) -> None:
        """Wait for every send request in flight; raise the first error among them."""
        self._window.flush()

    def _submit(
        self, request: bytes, count: int, groups: Iterable[str | None] | None
    ) -> PendingSend:
        if not count:
            raise InvalidArgumentError("send_batch needs at least one message")
        send = self._raw_method("SendMessage")

        def decode(response: service_pb2.SendMessageResponse) -> list[SendReceipt]:
            return receipts_of(response, count)

        def once() -> list[SendReceipt]:
            return decode(send(request, timeout=self.timeout_s, metadata=self._metadata()))

        return self._window.submit(
            lambda: send.future(request, timeout=self.timeout_s, metadata=self._metadata()),
            decode,
            lambda first: self._again(first, "SendMessage", once),
            count,
            frozenset(g for g in groups or () if g),
        )

    def _submit_bulk(
        self, topic: str, bodies: Sequence[bytes], *, want_receipts: bool = True, **columns: Any
    ) -> PendingSend | None:
        """Send plain messages with SendBulk; None when the broker does not offer it (it
        is asked once per client: the first bulk send waits for its answer)."""
        request, ids = bulk.encode_bulk(topic, bodies, **columns)
        call = self._raw_methods.get(bulk.SEND_PATH)
        if call is None:
            call = self._channel_for_process().unary_unary(bulk.SEND_PATH)
            self._raw_methods[bulk.SEND_PATH] = call

        def once() -> list[SendReceipt]:
            return bulk.bulk_receipts(
                call(request, timeout=self.timeout_s, metadata=self._metadata()),
                ids,
                receipts=want_receipts,
            )

        if self._bulk_offered is None:
            try:
                receipts = self._retrying("SendBulk", once)
            except UnsupportedError as exc:
                if isinstance(exc, ServiceNotOfferedError):  # no bulk service at all
                    standard.mark_standard(self.endpoint)
                self._bulk_offered = False
                return None
            self._bulk_offered = True
            return self._window.finished(receipts)
        return self._window.submit(
            lambda: call.future(request, timeout=self.timeout_s, metadata=self._metadata()),
            lambda response: bulk.bulk_receipts(response, ids, receipts=want_receipts),
            lambda first: self._again(first, "SendBulk", once),
            len(bodies),
            frozenset(),
        )
