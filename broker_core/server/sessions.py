"""Telemetry sessions: who is connected, what they told us, and how to reach them.

A RocketMQ 5 client opens one ``Telemetry`` stream per broker and first sends its
settings (client type, publishing topics or consumer group and subscriptions). A
:class:`Session` is one such stream: the client id (``x-mq-client-id`` header), the
:class:`Profile` taken from its settings, and an outbox of commands for the stream's
response side. Server-initiated commands (``recover_orphaned_transaction_command``) are
put into the outbox from any thread; the stream's handler thread drains it.

Registry: ``ServerContext.sessions`` maps a client id to its latest session, guarded by
``ServerContext.lock``. A newer stream of the same client replaces the older one (and
inherits what it knew until the client's settings arrive on the new stream). A
session whose stream ended stays as the client's profile (heartbeats still need its
topics) until the client terminates, opens a new stream, or has been gone for the
broker's ``client_expiry_ms``. Nothing here is durable: clients resend their settings.

Producer groups: RocketMQ 5 producers have none; as RocketMQ's proxy does, a producer is
registered (and its transactions are checked) under each topic it publishes to, the topic
name serving as the producer group.

Threads: every function may be called from any thread.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Final, Literal

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.transaction.check import CheckRequest
from broker_core.errors import (
    InvalidArgumentError,
    NotFoundError,
    RocketMQError,
)
from broker_core.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, StoredMessage
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import to_pb_message

log = logging.getLogger(__name__)

CLIENT_ID_HEADER: Final = "x-mq-client-id"
TERMINATION_LINGER_S: Final = 5.0  # after NotifyClientTermination the client closes the stream
POLL_S: Final = 0.5  # how often a stream waiting for commands checks it is still wanted

Kind = Literal["producer", "consumer"]
_CONSUMER_TYPES: Final = frozenset(
    {
        pb.ClientType.PUSH_CONSUMER,
        pb.ClientType.SIMPLE_CONSUMER,
        pb.ClientType.PULL_CONSUMER,
        pb.ClientType.LITE_PUSH_CONSUMER,
        pb.ClientType.LITE_SIMPLE_CONSUMER,
    }
)


def client_id_of(context: grpc.ServicerContext, *, required: bool = True) -> str:
    """The ``x-mq-client-id`` metadata header; InvalidArgumentError when required and absent."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER and isinstance(value, str) and value:
            return value
    if required:
        raise InvalidArgumentError(f"the {CLIENT_ID_HEADER} metadata header is missing")
    return ""


def kind_of(client_type: int) -> Kind:
    """``producer`` or ``consumer`` (lite consumers too) for a ``ClientType``; BAD_REQUEST
    otherwise."""
    if client_type == pb.ClientType.PRODUCER:
        return "producer"
    if client_type in _CONSUMER_TYPES:
        return "consumer"
    raise InvalidArgumentError(f"unrecognised client type {client_type}")


@dataclass(frozen=True, slots=True)
class Profile:
    """What a client's settings say about it."""

    kind: Kind
    group: str  # the consumer group; "" for a producer
    topics: frozenset[str]  # topics published (producer) or subscribed (consumer)


@dataclass(eq=False)
class Session:
    """One Telemetry stream of one client; ``send`` may be called from any thread."""

    client_id: str
    peer: str = ""
    profile: Profile | None = None  # None until the client's settings arrived
    closed_at_s: float | None = None  # monotonic time the stream ended
    sent_to: set[str] = field(default_factory=set)  # topics it sent transactions to
    _outbox: queue.SimpleQueue[service_pb2.TelemetryCommand | None] = field(
        default_factory=queue.SimpleQueue
    )
    _closed: threading.Event = field(default_factory=threading.Event)
    _linger_until_s: float | None = None

    @property
    def open(self) -> bool:
        return not self._closed.is_set()

    def send(self, command: service_pb2.TelemetryCommand) -> bool:
        """Queue a TelemetryCommand for the client; False when the stream has ended."""
        if self._closed.is_set():
            return False
        self._outbox.put(command)
        return True

    def close(self) -> None:
        """End the stream (idempotent): commands already queued are still sent."""
        if not self._closed.is_set():
            self._closed.set()
            self.closed_at_s = time.monotonic()
            self._outbox.put(None)

    def retire(self, linger_s: float = TERMINATION_LINGER_S) -> None:
        """Let the client close the stream itself, ending it after ``linger_s`` at the latest."""
        self._linger_until_s = time.monotonic() + linger_s

    def _lingered_out(self) -> bool:
        return self._linger_until_s is not None and time.monotonic() > self._linger_until_s

    def outgoing(self, is_active: Callable[[], bool]) -> Iterator[service_pb2.TelemetryCommand]:
        """Commands to write to the stream, until it is closed, retired, or ``is_active`` fails."""
        while True:
            try:
                command = self._outbox.get(timeout=POLL_S)
            except queue.Empty:
                if not is_active() or self._lingered_out():
                    self.close()
                    return
                continue
            if command is None:
                return
            yield command


# ---- the registry ----------------------------------------------------------------------------


def _sessions(ctx: ServerContext) -> dict[str, Session]:
    """``ctx.sessions`` typed; the caller holds ``ctx.lock``."""
    return ctx.sessions  # type: ignore[return-value]


def get(ctx: ServerContext, client_id: str) -> Session | None:
    """The client's latest session (open or not), or None."""
    with ctx.lock:
        return _sessions(ctx).get(client_id)


def attach(ctx: ServerContext, session: Session) -> None:
    """Make a new stream its client's current session, inheriting what the previous one
    knew until the client's settings arrive; forget long-gone clients' profiles."""
    expiry_s = ctx.broker.config.client_expiry_ms / 1000
    now = time.monotonic()
    with ctx.lock:
        table = _sessions(ctx)
        for client_id, old in list(table.items()):
            if old.closed_at_s is not None and now - old.closed_at_s > expiry_s:
                del table[client_id]
        previous = table.get(session.client_id)
        if previous is not None:
            session.sent_to |= previous.sent_to
            session.profile = session.profile or previous.profile
        table[session.client_id] = session
    install_transaction_checker(ctx)


def set_profile(ctx: ServerContext, session: Session, profile: Profile) -> None:
    """Record the client's settings and register it with the broker (like a heartbeat).

    A producer keeps the topics it was seen sending transactions to: its settings may
    have been written before it learnt of them.
    """
    with ctx.lock:
        if profile.kind == "producer":
            profile = replace(profile, topics=profile.topics | session.sent_to)
        session.profile = profile
    heartbeat(ctx, session.client_id, profile)


def note_publishing(ctx: ServerContext, client_id: str, topic: str) -> None:
    """Remember that a producer sends to ``topic`` (so it can be asked about transactions)."""
    with ctx.lock:
        session = _sessions(ctx).get(client_id)
        if session is None:
            return
        session.sent_to.add(topic)
        profile = session.profile
        if profile is not None and profile.kind == "producer" and topic not in profile.topics:
            session.profile = replace(profile, topics=profile.topics | {topic})


def terminate(ctx: ServerContext, client_id: str, group: str = "") -> None:
    """A client said goodbye: unregister it everywhere and retire its stream."""
    with ctx.lock:
        session = _sessions(ctx).pop(client_id, None)
    profile = session.profile if session else None
    groups = {group} if group else set()
    if profile is not None:
        groups |= set(profile.topics) if profile.kind == "producer" else {profile.group}
    for name in groups:
        ctx.broker.clients.unregister(name, client_id)
    ctx.broker.lite.forget_client(client_id)
    if session is not None:
        session.retire()
    log.info("client %s terminated (groups %s)", client_id, sorted(groups))


def detach(ctx: ServerContext, session: Session) -> None:
    """The stream ended: keep the profile, but stop routing commands to it."""
    session.close()


def close_all(ctx: ServerContext) -> None:
    """End every stream (server shutdown), so stopping need not wait for the grace period."""
    with ctx.lock:
        sessions = list(_sessions(ctx).values())
    for session in sessions:
        session.close()


def heartbeat(ctx: ServerContext, client_id: str, profile: Profile) -> None:
    """Tell the broker's client registry the client is alive, under every group it has."""
    if profile.kind == "consumer":
        ctx.broker.consumer_groups.heartbeat(
            profile.group, client_id, topics=sorted(profile.topics), kind="consumer"
        )
        return
    for topic in sorted(profile.topics):
        ctx.broker.consumer_groups.heartbeat(topic, client_id, topics=[topic], kind="producer")


def producers_of(ctx: ServerContext, topic: str) -> list[Session]:
    """Open sessions of producers that publish to ``topic``."""
    with ctx.lock:
        return [
            s
            for s in _sessions(ctx).values()
            if s.open
            and s.profile is not None
            and s.profile.kind == "producer"
            and topic in s.profile.topics
        ]


# ---- transaction check-back -----------------------------------------------------------------


# Broker -> the server context whose checker (or a chain in front of it) it asks now.
_CHECKED_BY: weakref.WeakKeyDictionary[object, weakref.ref[ServerContext]] = (
    weakref.WeakKeyDictionary()
)


def install_transaction_checker(ctx: ServerContext) -> None:
    """Route the broker's transaction check-backs to producers' streams, once per server.

    Once only: the 4.x remoting front end puts its own checker in front of this one
    (``remoting_broker/transactions.py``), and installing this one again — every new
    Telemetry stream calls this — cut the 4.x producers off their check-backs for the
    broker's life: their UNKNOW halves were asked of nobody and rolled back.
    """
    installed = _CHECKED_BY.get(ctx.broker)
    if installed is not None and installed() is ctx:
        return
    _CHECKED_BY[ctx.broker] = weakref.ref(ctx)

    def checker(request: CheckRequest) -> None:
        try:
            check_transaction(ctx, request)
        except RocketMQError:
            raise
        except Exception as exc:  # the check thread only survives our own errors
            log.exception("check-back of %s failed", request.message_id)
            raise RocketMQError(f"check-back of {request.message_id} failed: {exc!r}") from exc

    ctx.broker.set_transaction_checker(checker)


def check_transaction(ctx: ServerContext, request: CheckRequest) -> None:
    """Ask one live producer of the half message's topic to resolve it.

    Raises NotFoundError when no producer of that topic is connected (the broker asks
    again at the next check; after its maximum it rolls the message back).
    """
    candidates = producers_of(ctx, request.producer_group)
    command = service_pb2.TelemetryCommand(
        recover_orphaned_transaction_command=service_pb2.RecoverOrphanedTransactionCommand(
            message=half_to_proto(request.half, request.message_id),
            transaction_id=request.transaction_id,
        )
    )
    random.shuffle(candidates)
    for session in candidates:
        if session.send(command):
            log.info(
                "asked producer %s about transaction %s of %s (check %d)",
                session.client_id,
                request.transaction_id,
                request.message_id,
                request.check_times,
            )
            return
    raise NotFoundError(
        f"no producer of topic {request.producer_group} is connected to resolve transaction "
        f"{request.transaction_id} of message {request.message_id}"
    )


def half_to_proto(half: StoredMessage, message_id: str) -> pb.Message:
    """The half message as its producer sent it: the real topic and queue, the client's id,
    tag, keys and user properties (what the client's TransactionChecker is shown)."""
    proto = to_pb_message(half, topic=half.properties.get(PROPERTY_REAL_TOPIC, half.topic))
    system = proto.system_properties
    system.message_id = message_id
    real_qid = half.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    system.queue_id = int(real_qid) if real_qid.isdigit() else 0
    system.ClearField("queue_offset")  # its offset in the half topic means nothing to them
    system.ClearField("delivery_attempt")
    return proto
