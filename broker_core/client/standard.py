"""The standard-protocol fallback: the client against an endpoint that serves only
``apache.rocketmq.v2`` (a RocketMQ 5 proxy, or our broker started with ``--no-extensions``).

Our own services (``rmq.admin.v1.Admin``, ``rmq.bulk.v1.Bulk``) are the fast path. An
endpoint without them answers gRPC UNIMPLEMENTED (:class:`ServiceNotOfferedError`); the
client notes that per endpoint and process (:func:`mark_standard`, asked with
:func:`is_standard`) for ``REPROBE_S`` and meanwhile goes straight to the v2 RPCs:

    what the client needs          with our services     standard v2 fallback
    -----------------------------  --------------------  ---------------------------------
    queue bounds (topic_status)    Admin/TopicStatus     QueryRoute + 2 QueryOffset a queue
    the broker's name              Admin/Health          QueryRoute of a topic given
    bulk reads (pull_columns)      Bulk/PullRaw          PullMessage, columns per message
    plain sends                    Bulk/SendBulk         SendMessage (``wire.py``)
    routes, offsets, pull, commit  v2 already            v2 (QueryRoute, QueryOffset,
    and transactions                                     GetOffset, UpdateOffset, PullMessage,
                                                         SendMessage, EndTransaction)
    any other admin call           Admin/...             none: :func:`no_standard_rpc`

What the fallback cannot do, it refuses with an UnsupportedError that names the call, the
endpoint and what to do instead (listing topics for a pattern, looking messages up by key
for the exactly-once streaming sink, creating topics). An address can change hands (a
proxy replaced by our broker, a test's port reused): the mark lapses after
``REPROBE_S``, an admin call always asks the endpoint itself and clears the mark when
it is answered, and :func:`forget` clears it at once (``launch_broker`` does, for the
address it just started a broker on).

Contract of :func:`pull_columns`: the same :class:`ColumnBatch` the bulk path returns,
column for column (a test compares the two paths' Spark rows), except that messages
carry no commitlog position (``physical_offset`` 0, ``store_host`` zeros: their message
id always comes from the message itself), user properties come in the order the
broker's protobuf map gives them, and ``max_bytes`` is not applied (a pull
returns at most ``STANDARD_PULL_MAX`` messages, fewer if the broker caps its batches).
Functions take the calls they use (an endpoint's offsets, its pull); any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

import numpy as np
import pyarrow as pa

from broker_core.client.columnar import ColumnBatch, UnitColumns
from broker_core.client.model import QueueInfo, ReceivedMessage
from broker_core.errors import ServiceNotOfferedError, TopicNotFoundError, UnsupportedError
from broker_core.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from broker_core.protocol.unit import NAME_VALUE_SEP, PROPERTY_SEP


class RouteReader(Protocol):
    """What the fallback needs of an endpoint's offsets calls (``client/offsets.py``)."""

    @property
    def endpoint(self) -> str: ...

    def query_route(self, topic: str) -> list[QueueInfo]: ...

    def query_offset(self, topic: str, queue_id: int, policy: str = "END") -> int: ...


STANDARD_PULL_MAX: Final = 1_024  # messages per PullMessage (our broker's max_pull_batch)
READABLE: Final = frozenset({"READ", "READ_WRITE"})

REPROBE_S: Final = 60.0  # how long a mark holds before the fast path is tried again

_standard: dict[str, float] = {}  # endpoint serving apache.rocketmq.v2 only -> mark's expiry
_lock = threading.Lock()

_HINTS: Final = {
    "ListTopics": "; name the topics ('topics' / 'subscribe') instead of a pattern",
    "QueryMessage": (
        "; the exactly-once streaming sink finds its batch records this way, so it needs "
        "a broker with our services (the batch exactly-once sink and plain writes do not)"
    ),
    "CreateTopic": "; create the topic with the cluster's own tools, or let a send auto-create it",
}


def is_standard(endpoint: str) -> bool:
    """True while ``endpoint``'s UNIMPLEMENTED for one of our services is recent."""
    expiry = _standard.get(endpoint)  # a lapsed mark stays until overwritten: harmless
    return expiry is not None and time.monotonic() < expiry


def mark_standard(endpoint: str) -> None:
    """Remember for ``REPROBE_S`` that ``endpoint`` serves the standard protocol only."""
    with _lock:
        _standard[endpoint] = time.monotonic() + REPROBE_S


def forget(endpoint: str) -> None:
    """Ask ``endpoint`` for our services again on the next call."""
    with _lock:
        _standard.pop(endpoint, None)


def no_standard_rpc(method: str, endpoint: str) -> ServiceNotOfferedError:
    """The error for admin call ``method`` against a standard-only endpoint."""
    return ServiceNotOfferedError(
        f"{method} needs the broker's admin service rmq.admin.v1.Admin, which {endpoint} "
        f"does not offer (a standard RocketMQ 5 endpoint, or a broker started with "
        f"--no-extensions), and apache.rocketmq.v2 has no RPC for it{_HINTS.get(method, '')}"
    )


def _own_queues(client: RouteReader, queues: list[QueueInfo]) -> list[QueueInfo]:
    """The queues of the broker behind ``client`` among a route's (which may list a
    whole cluster's): all of them for one broker, else those at the client's endpoint."""
    names = {q.broker_name for q in queues}
    if len(names) <= 1:
        return queues
    mine = [q for q in queues if q.endpoint == client.endpoint]
    if not mine:
        raise UnsupportedError(
            f"the route of {queues[0].topic} at {client.endpoint} lists brokers "
            f"{sorted(names)}, none at that endpoint; read it through the NameServers "
            f"('namesrv') or give each broker's own endpoint"
        )
    return mine


def topic_status(client: RouteReader, topic: str) -> list[dict[str, int]]:
    """Admin TopicStatus over v2: per readable queue ``queue_id``, ``min_offset``,
    ``max_offset`` (TopicNotFoundError as the admin call raises it)."""
    queues = _own_queues(client, client.query_route(topic))
    try:
        return [
            {
                "queue_id": q.queue_id,
                "min_offset": client.query_offset(topic, q.queue_id, "BEGINNING"),
                "max_offset": client.query_offset(topic, q.queue_id, "END"),
            }
            for q in queues
            if q.permission in READABLE
        ]
    except ServiceNotOfferedError as exc:  # Apache RocketMQ's proxy (5.5.0) has none
        raise ServiceNotOfferedError(
            f"reading {topic} needs the queue bounds (rmq.admin.v1.Admin/TopicStatus, or "
            f"apache.rocketmq.v2 QueryOffset) and then PullMessage; {client.endpoint} "
            f"offers neither (Apache RocketMQ's 5.x proxy does not implement QueryOffset, "
            f"PullMessage, GetOffset or UpdateOffset), so the rocketmq source cannot read "
            f"there; read through a broker with our services ({exc})"
        ) from None


def broker_name(client: RouteReader, topics: Iterable[str]) -> str:
    """The name of the broker behind ``client``, from the route of the first of ``topics``
    it has; UnsupportedError when none is given or none exists there."""
    tried = []
    for topic in topics:
        tried.append(topic)
        try:
            queues = _own_queues(client, client.query_route(topic))
        except TopicNotFoundError:
            continue
        if queues:
            return queues[0].broker_name
    raise UnsupportedError(
        f"{client.endpoint} offers no admin service (Health) to tell its broker name, and "
        f"none of the topics {tried} has a route there; name an existing topic"
    )


# ---- reads -----------------------------------------------------------------------------


def _encoded_properties(msg: ReceivedMessage) -> str:
    """The message's properties as a stored unit holds them (``name\\x01value\\x02``)."""
    pairs = [(PROPERTY_UNIQ_KEY, msg.message_id)]
    if msg.tag is not None:
        pairs.append((PROPERTY_TAGS, msg.tag))
    if msg.keys:
        pairs.append((PROPERTY_KEYS, KEY_SEPARATOR.join(msg.keys)))
    if msg.message_group is not None:
        pairs.append((PROPERTY_MESSAGE_GROUP, msg.message_group))
    pairs += msg.properties.items()
    return "".join(f"{name}{NAME_VALUE_SEP}{value}{PROPERTY_SEP}" for name, value in pairs)


def columns_of(messages: Sequence[ReceivedMessage]) -> UnitColumns:
    """The messages of a PullMessage as the columns ``columnar.decode_units`` gives."""
    count = len(messages)

    def ints(name: str, dtype: type) -> np.ndarray:
        return np.fromiter((getattr(m, name) for m in messages), dtype, count)

    return UnitColumns(
        count=count,
        topic=pa.array([m.topic for m in messages], pa.string()),
        queue_id=ints("queue_id", np.int32),
        queue_offset=ints("queue_offset", np.int64),
        physical_offset=np.zeros(count, np.int64),
        born_timestamp_ms=ints("born_timestamp_ms", np.int64),
        store_timestamp_ms=ints("store_timestamp_ms", np.int64),
        body=pa.array([m.body for m in messages], pa.binary()),
        properties=pa.array([_encoded_properties(m) for m in messages], pa.string()),
        store_host=np.zeros((count, 8), np.uint8),
    )


def pull_columns(
    pull: Callable[..., Any],
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    *,
    filter_expression: str | None,
    filter_type: str,
    long_polling_timeout_ms: int,
) -> ColumnBatch:
    """One PullMessage of up to ``max_count`` (at most STANDARD_PULL_MAX) messages, as
    columns, by ``pull`` (``Puller.pull``); errors as it raises them."""
    batch = pull(
        group,
        topic,
        queue_id,
        offset,
        min(max_count, STANDARD_PULL_MAX),
        filter_expression=filter_expression,
        filter_type=filter_type,
        long_polling_timeout_ms=long_polling_timeout_ms,
        with_bounds=False,
    )
    return ColumnBatch(columns_of(batch.messages), batch.next_offset)
