"""Offset pulls of one broker endpoint (:class:`Puller`): PullMessage (:meth:`Puller.pull`),
our bulk PullRaw (:meth:`Puller.pull_raw`) and columns by either
(:meth:`Puller.pull_columns`). Reads are idempotent, so retried. A cluster client routes
each by its ``broker=`` keyword (``client/cluster.py``); here it is not used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypedDict

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import convert, standard
from broker_core.client.admin import encode_request
from broker_core.client.columnar import ColumnBatch, check_placement, decode_units
from broker_core.client.errors import check
from broker_core.client.model import PullBatch, RawPullBatch, ReceivedMessage
from broker_core.client.offsets import Offsets
from broker_core.client.raw import RAW_PULL_METHOD, decode_raw_pull
from broker_core.client.transport import Transport
from broker_core.errors import InvalidArgumentError, RocketMQError

if TYPE_CHECKING:
    from typing_extensions import Unpack

FILTER_TYPES: Final = {"TAG": pb.FilterType.TAG, "SQL": pb.FilterType.SQL}


class PullOptions(TypedDict, total=False):
    """The keyword options of Puller.pull_raw` and Puller.pull_columns`.

    ``max_bytes`` (None: the broker's 8 MiB), ``filter_expression`` (None: every message)
    of ``filter_type`` TAG (default) or SQL, ``long_polling_timeout_ms`` (default 0: answer
    at once), ``broker`` (a cluster client's broker group)."""

    max_bytes: int | None
    filter_expression: str | None
    filter_type: str
    long_polling_timeout_ms: int
    broker: str | None


def check_pull(filter_type: str, offset: int, max_count: int) -> None:
    """InvalidArgumentError unless ``filter_type`` is TAG or SQL, ``offset >= 0`` and
    ``max_count >= 1``."""
    if filter_type not in FILTER_TYPES:
        raise InvalidArgumentError(f"filter_type must be TAG or SQL, got {filter_type!r}")
    if max_count < 1 or offset < 0:
        raise InvalidArgumentError("pull needs max_count >= 1 and offset >= 0")


class Puller:
    """Pulls of one queue from an offset (they read the queue's bounds by QueryOffset)."""

    def __init__(self, transport: Transport, offsets: Offsets) -> None:
        self.transport = transport
        self.offsets = offsets

    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        filter_expression: str | None = None,
        filter_type: str = "TAG",
        long_polling_timeout_ms: int = 0,
        with_bounds: bool = True,
        broker: str | None = None,
    ) -> PullBatch:
        """Up to ``max_count`` messages of one queue from ``offset``, in offset order.

        To read exactly ``[start, end)``, pull from ``start`` with ``max_count = end -
        offset`` until ``next_offset >= end`` (a pull never returns more than asked). An
        offset outside the queue raises InvalidOffsetError (its ``next_offset`` field,
        when the broker gave one, is the nearest valid offset); an empty batch with
        ``next_offset == offset`` means the queue holds nothing newer. With
        ``long_polling_timeout_ms`` the broker waits that long for new messages.
        ``with_bounds`` fills ``min_offset``/``max_offset`` (-1 otherwise).
        """
        check_pull(filter_type, offset, max_count)
        request = service_pb2.PullMessageRequest(
            group=self.transport.resource(group),
            message_queue=convert.message_queue(topic, queue_id),
            offset=offset,
            batch_size=max_count,
        )
        if filter_expression:
            request.filter_expression.type = FILTER_TYPES[filter_type]
            request.filter_expression.expression = filter_expression
        request.long_polling_timeout.FromMilliseconds(max(0, long_polling_timeout_ms))
        deadline_s = self.transport.timeout_s + max(0, long_polling_timeout_ms) / 1000
        messages, next_offset = self.transport.retrying(
            "PullMessage", lambda: self._pull_once(request, deadline_s)
        )
        # The PullMessage stream does not carry the queue's bounds: two cheap calls do.
        low, high = (
            (
                self.offsets.query_offset(topic, queue_id, "BEGINNING"),
                self.offsets.query_offset(topic, queue_id, "END"),
            )
            if with_bounds
            else (-1, -1)
        )
        return PullBatch(messages, next_offset, low, high)

    def pull_raw(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        **options: Unpack[PullOptions],
    ) -> RawPullBatch:
        """Like :meth:`pull`, but the units come back as stored, for decoding in bulk.

        One call can return up to the broker's ``max_raw_pull_batch`` units (and about
        ``max_bytes``, default 8 MiB). Decode and verify the batch with
        ``columnar.decode_units(batch.data, batch.sizes)``. Options: :class:`PullOptions`.
        Errors as for :meth:`pull`.
        """
        check_pull(options.get("filter_type", "TAG"), offset, max_count)
        request = encode_request(_raw_payload(group, topic, queue_id, offset, max_count, options))
        transport = self.transport
        call = transport.channel_for_process().unary_unary(RAW_PULL_METHOD)
        timeout_s = transport.timeout_s + max(0, options.get("long_polling_timeout_ms", 0)) / 1000
        return transport.retrying(
            "PullRaw",
            lambda: decode_raw_pull(
                call(request, timeout=timeout_s, metadata=transport.metadata()), offset
            ),
        )

    def pull_columns(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        **options: Unpack[PullOptions],
    ) -> ColumnBatch:
        """Like :meth:`pull`, as columns checked to come from this queue in increasing
        offsets from ``offset`` (CorruptionError otherwise): a bulk pull (:meth:`pull_raw`,
        units CRC-checked) when the broker offers it, else a PullMessage
        (``standard.pull_columns``; ``max_bytes`` then does not apply). Options:
        :class:`PullOptions`. Errors as for :meth:`pull`."""

        def bulk() -> ColumnBatch:
            raw = self.pull_raw(group, topic, queue_id, offset, max_count, **options)
            return ColumnBatch(decode_units(raw.data, raw.sizes), raw.next_offset)

        def plain() -> ColumnBatch:
            return standard.pull_columns(
                self.pull,
                group,
                topic,
                queue_id,
                offset,
                max_count,
                filter_expression=options.get("filter_expression"),
                filter_type=options.get("filter_type", "TAG"),
                long_polling_timeout_ms=options.get("long_polling_timeout_ms", 0),
            )

        batch = self.transport.extended(bulk, plain)
        check_placement(batch.columns, topic, queue_id, offset)
        return batch

    def _pull_once(
        self, request: service_pb2.PullMessageRequest, deadline_s: float
    ) -> tuple[list[ReceivedMessage], int]:
        """One PullMessage stream: status, messages, next_offset (read to its end)."""
        messages, next_offset, status = [], None, None
        transport = self.transport
        stream = transport.stub.PullMessage(
            request, timeout=deadline_s, metadata=transport.metadata()
        )
        for response in stream:
            kind = response.WhichOneof("content")
            if kind == "status":
                status = response.status
            elif kind == "message":
                messages.append(convert.from_protobuf(response.message))
            elif kind == "next_offset":
                next_offset = response.next_offset
        if status is None:
            raise RocketMQError("PullMessage answered without a status")
        if status.code != pb.Code.MESSAGE_NOT_FOUND:  # MESSAGE_NOT_FOUND: nothing new
            check(status, next_offset=next_offset)
        if next_offset is None:
            next_offset = messages[-1].queue_offset + 1 if messages else request.offset
        return messages, next_offset


def _raw_payload(
    group: str, topic: str, queue_id: int, offset: int, max_count: int, options: PullOptions
) -> dict[str, Any]:
    """The PullRaw request's JSON payload; unset options are left to the broker."""
    payload: dict[str, Any] = {
        "group": group,
        "topic": topic,
        "queue_id": queue_id,
        "offset": offset,
        "max_count": max_count,
    }
    if options.get("max_bytes") is not None:
        payload["max_bytes"] = options["max_bytes"]
    if options.get("filter_expression"):
        payload.update(
            filter_type=options.get("filter_type", "TAG"),
            filter_expression=options["filter_expression"],
        )
    if options.get("long_polling_timeout_ms", 0) > 0:
        payload["long_polling_timeout_ms"] = options["long_polling_timeout_ms"]
    return payload
