"""The session family: ``Telemetry``, the bidirectional session stream of a client.

The client opens the stream and sends its ``settings``; we answer each settings command
with the server's settings (its own, merged with what the broker decides) and register
the client (``sessions.py``). The stream stays open so the broker can push commands —
``recover_orphaned_transaction_command`` for transaction check-backs — until the client
closes it, says goodbye (NotifyClientTermination), or the server stops.

What the server decides, as RocketMQ's proxy does:

* producers: ``publishing.max_body_size`` = the store's ``max_body_bytes``, message types
  validated, and a send retry policy (3 attempts, exponential 10 ms … 1 s);
* consumers: ``subscription.fifo`` from the group's config, the receive batch size, the
  long polling timeout (``max_long_polling_ms``), and the group's retry policy as
  ``backoff_policy`` (max attempts = max retries + 1).

Threads: the response side runs on the gRPC worker that called :func:`telemetry`; a daemon
thread per stream reads the client's commands. A bad settings command is answered with a
status (and no settings), never by ending the stream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Final

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.lite import MAX_LITE_TOPIC_CHARS
from broker_core.broker.retry import (
    MAX_DELAY_LEVEL,
    CustomBackoff,
    DelayLevelBackoff,
    ExponentialBackoff,
    RetryPolicy,
)
from broker_core.errors import RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import duration_of_ms as duration

log = logging.getLogger(__name__)

PRODUCER_MAX_ATTEMPTS: Final = 3
PRODUCER_BACKOFF_INITIAL_MS: Final = 10
PRODUCER_BACKOFF_MAX_MS: Final = 1_000
PRODUCER_BACKOFF_MULTIPLIER: Final = 2.0
RECEIVE_BATCH_SIZE: Final = 32
_IGNORED: Final = frozenset({"thread_stack_trace", "verify_message_result"})
CALL_SETTLE_S: Final = 1.0  # how long an ended call may take to finish after a cancel


def retry_policy_proto(policy: RetryPolicy) -> pb.RetryPolicy:
    """The group's retry policy as the protocol's ``RetryPolicy``.

    Delay-level backoff (RocketMQ's default) becomes the customized list of its delays
    (10s, 30s, 1m, … 2h), the last repeating, as the clients read customized backoffs.
    """
    proto = pb.RetryPolicy(max_attempts=policy.max_retries + 1)
    backoff = policy.backoff
    if isinstance(backoff, ExponentialBackoff):
        proto.exponential_backoff.CopyFrom(
            pb.ExponentialBackoff(
                initial=duration(backoff.initial_ms),
                max=duration(backoff.max_ms),
                multiplier=backoff.multiplier,
            )
        )
    elif isinstance(backoff, CustomBackoff):
        proto.customized_backoff.next.extend(duration(ms) for ms in backoff.delays_ms)
    else:
        assert isinstance(backoff, DelayLevelBackoff)
        retries = range(1, MAX_DELAY_LEVEL - DelayLevelBackoff.FIRST_LEVEL + 2)
        proto.customized_backoff.next.extend(duration(backoff.delay_ms(k)) for k in retries)
    return proto


def producer_settings(ctx: ServerContext, settings: pb.Settings) -> pb.Settings:
    """The client's settings with the server's publishing limits and send retry policy."""
    out = pb.Settings()
    out.CopyFrom(settings)
    out.publishing.max_body_size = ctx.broker.store_config.max_body_bytes
    out.publishing.validate_message_type = True
    out.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=PRODUCER_MAX_ATTEMPTS,
            exponential_backoff=pb.ExponentialBackoff(
                initial=duration(PRODUCER_BACKOFF_INITIAL_MS),
                max=duration(PRODUCER_BACKOFF_MAX_MS),
                multiplier=PRODUCER_BACKOFF_MULTIPLIER,
            ),
        )
    )
    out.metric.CopyFrom(pb.Metric(on=False))
    return out


def consumer_settings(ctx: ServerContext, settings: pb.Settings, group: str) -> pb.Settings:
    """The client's settings with the group's FIFO flag, polling limits and retry policy.

    Creates the group when auto-creation is on (GroupNotFoundError otherwise).
    """
    config = ctx.broker.group(group)
    out = pb.Settings()
    out.CopyFrom(settings)
    out.subscription.fifo = config.fifo
    out.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
    out.subscription.long_polling_timeout.CopyFrom(duration(ctx.broker.config.max_long_polling_ms))
    out.subscription.lite_subscription_quota = ctx.broker.lite.quota
    out.subscription.max_lite_topic_size = MAX_LITE_TOPIC_CHARS
    out.backoff_policy.CopyFrom(retry_policy_proto(config.retry_policy))
    out.metric.CopyFrom(pb.Metric(on=False))
    return out


def on_settings(
    ctx: ServerContext, session: sessions.Session, settings: pb.Settings
) -> pb.Settings:
    """Register the client from its settings; return the settings to answer with."""
    kind = sessions.kind_of(settings.client_type)
    if kind == "producer":
        topics = frozenset(validate_topic_name(r.name) for r in settings.publishing.topics)
        profile = sessions.Profile("producer", "", topics)
        reply = producer_settings(ctx, settings)
    else:
        group = validate_group_name(settings.subscription.group.name)
        entries = settings.subscription.subscriptions
        topics = frozenset(validate_topic_name(e.topic.name) for e in entries)
        profile = sessions.Profile("consumer", group, topics)
        reply = consumer_settings(ctx, settings, group)
    sessions.set_profile(ctx, session, profile)
    log.info(
        "client %s (%s) settings: %s %s",
        session.client_id,
        session.peer,
        kind,
        profile.group or sorted(profile.topics),
    )
    return reply


def on_command(
    ctx: ServerContext, session: sessions.Session, command: service_pb2.TelemetryCommand
) -> service_pb2.TelemetryCommand | None:
    """The answer to one command from the client, or None when it needs none."""
    which = command.WhichOneof("command")
    if which == "settings":
        try:
            settings = on_settings(ctx, session, command.settings)
        except Exception as exc:
            if not isinstance(exc, RocketMQError):
                log.exception("settings of client %s failed", session.client_id)
            return service_pb2.TelemetryCommand(status=status_of(exc))
        return service_pb2.TelemetryCommand(status=ok(), settings=settings)
    if which in _IGNORED:
        return None
    return service_pb2.TelemetryCommand(
        status=bad_request(f"unexpected telemetry command: {which or 'an empty one'}")
    )


def _read(
    ctx: ServerContext,
    session: sessions.Session,
    requests: Iterable[service_pb2.TelemetryCommand],
) -> None:
    """Answer the client's commands until it closes its side; then end ours."""
    try:
        for command in requests:
            reply = on_command(ctx, session, command)
            if reply is not None:
                session.send(reply)
    except grpc.RpcError:
        pass  # the client went away (cancelled, disconnected): nothing to answer
    except Exception:
        log.exception("telemetry stream of client %s failed", session.client_id)
    finally:
        session.close()


def telemetry(
    ctx: ServerContext,
    requests: Iterable[service_pb2.TelemetryCommand],
    context: grpc.ServicerContext,
) -> Iterator[service_pb2.TelemetryCommand]:
    """Serve one Telemetry stream: a reader thread answers, this generator writes."""
    session = sessions.Session(sessions.client_id_of(context), peer=context.peer())
    sessions.attach(ctx, session)
    finished = threading.Event()
    context.add_callback(session.close)
    context.add_callback(finished.set)
    reader = threading.Thread(
        target=_read,
        args=(ctx, session, requests),
        daemon=True,
        name=f"telemetry-{session.client_id}",
    )
    reader.start()
    try:
        yield from session.outgoing(context.is_active)
    finally:
        sessions.detach(ctx, session)
    if not context.is_active():
        _settle_ended_call(context, finished)


def _settle_ended_call(context: grpc.ServicerContext, finished: threading.Event) -> None:
    """Let gRPC finish a call it ended itself before this handler returns.

    gRPC ends the call with INTERNAL when a client frame does not deserialize. If the
    handler then returns before gRPC has finished that call, grpcio (1.85) sends a second
    status, which the core refuses: the call never finishes and server shutdown waits for
    it forever. So wait for the call to finish; if it does not, cancel it (gRPC then skips
    the second status) and wait again.
    """
    if finished.wait(CALL_SETTLE_S):
        return
    context.cancel()
    if not finished.wait(CALL_SETTLE_S):
        log.warning("telemetry call from %s did not finish after a cancel", context.peer())
