"""What several handler families share: filters, the long-poll budget, queues as protobuf.

Nothing here handles an RPC. A handler module imports from this module and from the
server's infrastructure (``context``, ``sessions``, ``convert_*``), never from a sibling
handler module, so each family reads on its own.

* :func:`message_filter` / :func:`text_filter`: the subscription filter of a pull or a
  receive, from a protobuf ``FilterExpression`` or from PullRaw's JSON fields; both
  refuse an unknown filter type the same way (FilterSyntaxError: ILLEGAL_FILTER_EXPRESSION).
* :func:`polling_budget_ms`: how long a long poll may wait within the client's deadline;
  :func:`requested_polling_ms`: the wait a PullMessage or ReceiveMessage request names.
* :func:`broker_proto`, :func:`message_queue_proto`, :func:`scheme_of`: this broker and
  its queues as the protocol's ``Broker`` and ``MessageQueue`` (QueryRoute,
  QueryAssignment and the cluster view build them alike: the client compares them).
"""

from __future__ import annotations

import ipaddress
from typing import Final

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.topics import MIXED, Perm, TopicConfig
from broker_core.errors import FilterSyntaxError
from broker_core.protocol.filters import SQL92, TAG, MessageFilter
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import ms_of_duration

# ---- filters ----------------------------------------------------------------------------

_FILTER_TYPES: Final = {
    pb.FilterType.FILTER_TYPE_UNSPECIFIED: TAG,
    pb.FilterType.TAG: TAG,
    pb.FilterType.SQL: SQL92,
}
_TEXT_FILTER_TYPES: Final = {"TAG": TAG, "SQL": SQL92}


def _filter(kind: str | None, shown: object, expression: str) -> MessageFilter | None:
    """The filter of ``kind`` (None: unknown, shown as ``shown``); None when it accepts all."""
    if kind is None:
        raise FilterSyntaxError(f"unknown filter type {shown}; expected TAG or SQL")
    if kind == SQL92 and not expression.strip():
        raise FilterSyntaxError("an SQL filter needs an expression")
    flt = MessageFilter(kind, expression)
    return None if flt.match_all else flt


def message_filter(expression: pb.FilterExpression) -> MessageFilter | None:
    """Our filter for a protobuf ``FilterExpression``; None when it accepts everything.

    An unspecified type means TAG and an empty expression means ``*``. Raises
    FilterSyntaxError (ILLEGAL_FILTER_EXPRESSION) for an unknown type or a bad expression.
    """
    kind = _FILTER_TYPES.get(expression.type)
    return _filter(kind, expression.type, expression.expression)


def text_filter(kind: str | None, expression: str | None) -> MessageFilter | None:
    """:func:`message_filter` for filters spelled as text (PullRaw): ``kind`` "TAG"
    (default, also for None) or "SQL", case-insensitive; same errors."""
    name = (kind or "TAG").upper()
    return _filter(_TEXT_FILTER_TYPES.get(name), repr(name), expression or "")


# ---- long polling -----------------------------------------------------------------------

ANSWER_MARGIN_MS: Final = 1_000  # answer this long before the client's deadline
DEFAULT_POLLING_MS: Final = 20_000  # without a deadline or a long_polling_timeout


def polling_budget_ms(context: grpc.ServicerContext, requested_ms: int | None) -> int:
    """How long a long poll may wait and still answer before the client's deadline.

    ``requested_ms`` is the request's long-polling timeout (None: not given). The result
    is ≥ 0; 0 means look once without waiting.
    """
    remaining_s = context.time_remaining()
    if remaining_s is None:
        return max(0, DEFAULT_POLLING_MS if requested_ms is None else requested_ms)
    remaining_ms = int(remaining_s * 1_000)
    margin_ms = min(ANSWER_MARGIN_MS, remaining_ms // 2)
    allowed_ms = max(0, remaining_ms - margin_ms)
    return allowed_ms if requested_ms is None else max(0, min(requested_ms, allowed_ms))


def requested_polling_ms(
    request: service_pb2.PullMessageRequest | service_pb2.ReceiveMessageRequest,
) -> int | None:
    """The request's ``long_polling_timeout`` in ms; None when it names none."""
    if not request.HasField("long_polling_timeout"):
        return None
    return ms_of_duration(request.long_polling_timeout)


# ---- this broker and its queues as protobuf ---------------------------------------------

Type = pb.MessageType
ACCEPTED_TYPES: Final[dict[str, tuple[int, ...]]] = {
    MIXED: (Type.NORMAL, Type.FIFO, Type.DELAY, Type.TRANSACTION, Type.PRIORITY),
    "NORMAL": (Type.NORMAL,),
    "FIFO": (Type.FIFO,),
    "DELAY": (Type.DELAY,),
    "TRANSACTION": (Type.TRANSACTION,),
    "PRIORITY": (Type.PRIORITY,),
    "LITE": (Type.LITE,),
}
_WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", "[::]", ""})


def scheme_of(host: str) -> int:
    """The protocol's address scheme of a host (IPv4, IPv6 or a domain name)."""
    try:
        version = ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return int(pb.AddressScheme.DOMAIN_NAME)
    return int(pb.AddressScheme.IPv4 if version == 4 else pb.AddressScheme.IPv6)


def broker_endpoints(ctx: ServerContext, access_point: pb.Endpoints | None = None) -> pb.Endpoints:
    """This broker's ``Endpoints``: the advertised host:port, or the client's access point
    when we advertise a wildcard address or run in controller mode (the client dialled
    the group; a slave forwards its sends to the master: ``server/master_forward.py``)."""
    host, port = ctx.host, ctx.port
    dialled_group = ctx.master_endpoint is not None  # controller mode: see master_forward
    wanted = host in _WILDCARD_HOSTS or dialled_group
    if wanted and access_point is not None and access_point.addresses:
        return access_point
    return pb.Endpoints(
        scheme=scheme_of(host), addresses=[pb.Address(host=host.strip("[]"), port=port)]
    )


def broker_proto(ctx: ServerContext, access_point: pb.Endpoints | None = None) -> pb.Broker:
    """This broker as the protocol's ``Broker`` (id 0: RocketMQ's master id)."""
    return pb.Broker(name=ctx.broker_name, id=0, endpoints=broker_endpoints(ctx, access_point))


def permission(config: TopicConfig, queue_id: int) -> int:
    """The protocol permission of one queue (NONE when it is neither readable nor writable)."""
    readable = queue_id < config.read_queue_nums and Perm.readable(config.perm)
    writable = queue_id < config.write_queue_nums and Perm.writeable(config.perm)
    if readable and writable:
        return int(pb.Permission.READ_WRITE)
    if readable:
        return int(pb.Permission.READ)
    return int(pb.Permission.WRITE if writable else pb.Permission.NONE)


def message_queue_proto(
    config: TopicConfig, queue_id: int, broker: pb.Broker, namespace: str = ""
) -> pb.MessageQueue:
    """One queue of the topic as the protocol's ``MessageQueue``."""
    return pb.MessageQueue(
        topic=pb.Resource(name=config.name, resource_namespace=namespace),
        id=queue_id,
        permission=permission(config, queue_id),
        broker=broker,
        accept_message_types=ACCEPTED_TYPES[config.message_type],
    )
