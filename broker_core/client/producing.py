"""The sends of one broker endpoint (:class:`Producer`), asynchronous and not.

``send_batch_async``/``send_columns_async`` put a request in the producer's window of
requests in flight (:mod:`broker_core.client.in_flight`); plain messages go by SendBulk
when the broker offers it (:mod:`broker_core.client.bulk`), others by SendMessage (so do
all messages to an endpoint without our services, :mod:`broker_core.client.standard`).
The synchronous ``send_batch``/``send_columns`` are these plus ``result()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from rocketmq.grpc_protocol import service_pb2

from broker_core.client import bulk, standard, wire
from broker_core.client.coalesce import Coalescer
from broker_core.client.in_flight import PendingSend, SendWindow, receipts_of
from broker_core.client.model import OutgoingMessage, SendReceipt
from broker_core.client.transport import Transport
from broker_core.errors import (
    InvalidArgumentError,
    RocketMQError,
    ServiceNotOfferedError,
    UnsupportedError,
)

T = TypeVar("T")


def _all_bytes(items: list[Any]) -> bool:
    """Whether ``items`` is non-empty and every item's type is exactly ``bytes`` (no
    Python-level step per item)."""
    return bool(items) and type(items[0]) is bytes and len(set(map(type, items))) == 1


class Producer:
    """Sends over the endpoint's window of requests in flight; the synchronous ones wait."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        settings = transport.settings
        self.bulk = settings.bulk  # plain batches go by SendBulk when the broker offers it
        self.bulk_offered: bool | None = None  # None: not asked yet
        self.window = SendWindow(settings.max_in_flight, lambda: transport.endpoint)
        # single sends of several threads share requests (client/coalesce.py)
        self.coalescer = Coalescer() if settings.coalesce else None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("window")  # requests in flight belong to this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        transport = self.transport
        self.window = SendWindow(transport.settings.max_in_flight, lambda: transport.endpoint)

    def _again(self, first: RocketMQError, what: str, attempt: Callable[[], T]) -> T:
        """A request's retries after its first attempt failed with ``first`` (retriable):
        ``max_attempts - 1`` more attempts, or ``first`` raised when there are none."""
        attempts = self.transport.max_attempts
        if attempts < 2:
            raise first
        return self.transport.retrying(what, attempt, attempts=attempts - 1)

    def send_batch(self, topic: str, messages: Iterable[Any]) -> list[SendReceipt]:
        """Send many messages to ``topic`` in ONE SendMessage request; receipts in order.

        Each item is an :class:`OutgoingMessage`, a tuple in its field order
        ``(body, tag, keys, properties, message_group, delivery_timestamp_ms)`` or a bare
        body. The broker stores the whole batch or none of it (a bad message fails the
        request with its error, e.g. MessageTooLargeError). A cluster client sends the
        batch to one broker group of the topic, the next group on the next call.
        """
        return self.send_batch_async(topic, messages).result()

    def send_columns(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        tags: Sequence[str | None] | None = None,
        keys: Sequence[Sequence[str] | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
        message_groups: Sequence[str | None] | None = None,
        delivery_ms: Sequence[int | None] | None = None,
    ) -> list[SendReceipt]:
        """:meth:`send_batch` for messages given column by column, with no object per
        message: columns as :func:`wire.encode_send_request` takes them (None: absent)."""
        return self.send_columns_async(
            topic,
            bodies,
            tags=tags,
            keys=keys,
            properties=properties,
            message_groups=message_groups,
            delivery_ms=delivery_ms,
        ).result()

    def send(self, topic: str, body: bytes | str, **fields: Any) -> SendReceipt:
        """Send one message and wait for its receipt; ``fields`` are
        :class:`OutgoingMessage`'s (tag, keys, ...).

        One blocking SendMessage call (retried as ``_retrying`` says): the caller waits
        anyway, so no future (grpcio would start a channel-spin thread for it). When this
        client has requests in flight (``send_batch_async``), the message queues behind
        them in the window instead, so message groups keep their order. A cluster client
        sends it to the topic's next broker group (its message group's, for FIFO). With
        ``coalesce=True`` sends that other threads make meanwhile share the request
        (:mod:`broker_core.client.coalesce`).
        """
        data = body.encode("utf-8") if isinstance(body, str) else body
        message = OutgoingMessage(data, **fields)
        if self.window.open:
            return self.send_batch_async(topic, [message]).result()[0]
        if self.coalescer is not None:
            return self.coalescer.send(topic, message, self._send_blocking)
        return self._send_blocking(topic, [message])[0]

    def _send_blocking(self, topic: str, messages: list[OutgoingMessage]) -> list[SendReceipt]:
        """``messages`` in one blocking SendMessage call (retried); their receipts."""
        transport, timeout_s = self.transport, self.transport.timeout_s
        request, count = wire.encode_messages(topic, messages, namespace=transport.namespace)
        call = transport.raw_method("SendMessage")
        return transport.retrying(
            "SendMessage",
            lambda: receipts_of(
                call(request, timeout=timeout_s, metadata=transport.metadata()),
                count,
                request,
            ),
        )

    def send_batch_async(self, topic: str, messages: Iterable[Any]) -> PendingSend:
        """:meth:`send_batch` without waiting for the answer: the request joins the
        requests in flight (at most ``max_in_flight``; message groups kept in order, see
        :mod:`broker_core.client.in_flight`). ``result()`` gives the receipts or raises;
        :meth:`flush` waits for every request in flight."""
        items = list(messages)
        if _all_bytes(items):  # bodies alone: no group to read
            return self.send_columns_async(topic, items)
        groups = [None if type(m) is bytes else OutgoingMessage.of(m).message_group for m in items]
        request, count = wire.encode_messages(topic, items, namespace=self.transport.namespace)
        return self._submit(request, count, groups)

    def send_columns_async(
        self, topic: str, bodies: Sequence[bytes], *, receipts: bool = True, **columns: Any
    ) -> PendingSend:
        """:meth:`send_columns` without waiting (see :meth:`send_batch_async`).

        ``receipts=False`` (a sender that only needs to know the batch was stored, as the
        Spark sink): a SendBulk request's answer is still checked (status, one offset per
        message) but ``result()`` gives ``[]``, and no message id string is made."""
        plain = not any(columns.get("message_groups") or ()) and not any(
            columns.get("delivery_ms") or ()
        )
        namespace = self.transport.namespace
        offered = self.bulk_offered is not False and not standard.is_standard(
            self.transport.endpoint
        )
        if plain and self.bulk and not namespace and offered:
            pending = self._submit_bulk(
                topic,
                bodies,
                want_receipts=receipts,
                **{name: columns.get(name) for name in ("tags", "keys", "properties")},
            )
            if pending is not None:
                return pending
        request = wire.encode_send_request(topic, bodies, namespace=namespace, **columns)
        return self._submit(request, len(bodies), columns.get("message_groups"))

    def flush(self) -> None:
        """Wait for every send request in flight; raise the first error among them."""
        self.window.flush()

    def _submit(
        self, request: bytes, count: int, groups: Iterable[str | None] | None
    ) -> PendingSend:
        if not count:
            raise InvalidArgumentError("send_batch needs at least one message")
        transport, timeout_s = self.transport, self.transport.timeout_s
        send = transport.raw_method("SendMessage")

        def decode(response: service_pb2.SendMessageResponse) -> list[SendReceipt]:
            return receipts_of(response, count, request)

        def once() -> list[SendReceipt]:
            return decode(send(request, timeout=timeout_s, metadata=transport.metadata()))

        return self.window.submit(
            lambda: send.future(request, timeout=timeout_s, metadata=transport.metadata()),
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
        transport, timeout_s = self.transport, self.transport.timeout_s
        request, ids = bulk.encode_bulk(topic, bodies, **columns)
        call = transport.raw_methods.get(bulk.SEND_PATH)
        if call is None:
            call = transport.channel_for_process().unary_unary(bulk.SEND_PATH)
            transport.raw_methods[bulk.SEND_PATH] = call

        def once() -> list[SendReceipt]:
            return bulk.bulk_receipts(
                call(request, timeout=timeout_s, metadata=transport.metadata()),
                ids,
                receipts=want_receipts,
            )

        if self.bulk_offered is None:
            try:
                receipts = transport.retrying("SendBulk", once)
            except UnsupportedError as exc:
                if isinstance(exc, ServiceNotOfferedError):  # no bulk service at all
                    standard.mark_standard(transport.endpoint)
                self.bulk_offered = False
                return None
            self.bulk_offered = True
            return self.window.finished(receipts)
        return self.window.submit(
            lambda: call.future(request, timeout=timeout_s, metadata=transport.metadata()),
            lambda response: bulk.bulk_receipts(response, ids, receipts=want_receipts),
            lambda first: self._again(first, "SendBulk", once),
            len(bodies),
            frozenset(),
        )
