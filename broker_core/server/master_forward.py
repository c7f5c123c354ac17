"""Controller mode: a slave forwards a producer's send to its group's current master.

RocketMQ 5's cluster-mode proxy idea for one broker group: the official client is given
every broker's endpoint (``"h:p1;h:p2"``) and QueryRoute answers with exactly that access
point (``handlers/common.broker_endpoints``), so the client keeps one channel to the whole group
and never learns which broker is master. Whichever broker the channel reaches answers:
the master stores the message, a slave sends the call on, once, to the master it knows
from etcd (``ControllerAgent.master_endpoint``) with ``x-mq-forwarded-by`` set.

Contract of :func:`forward_send`: the master's response, or ``None`` when this broker
was itself elected master meanwhile (the caller stores the message here), or
NotMasterError (the call was itself forwarded: no loops) or BrokerNotReachableError
(PROXY_TIMEOUT, which the client retries) — never a partial answer. A failover costs the
producer latency, not an error: while no master is known, or the known one refuses
connections (it died and its lease has not expired yet), the call is held and forwarded
as soon as a master answers — for at most ``FORWARD_HOLD_S`` (a lease TTL and the
election after it, with margin) and never past the caller's own deadline. A master that
took the call and did not answer in time (DEADLINE_EXCEEDED) is not asked again: it may
have stored the message.
"""

from __future__ import annotations

import threading
import time
from typing import Final

import grpc
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.cluster.forward import FORWARDED_BY, was_forwarded
from broker_core.config import Role
from broker_core.errors import BrokerNotReachableError, NotMasterError
from broker_core.server.context import ServerContext

FORWARD_SEND_TIMEOUT_S: Final = 5.0
FORWARD_HOLD_S: Final = 8.0  # > lease TTL (2 s) + election rounds, with margin
HOLD_POLL_S: Final = 0.05

_lock = threading.Lock()
_stubs: dict[str, service_pb2_grpc.MessagingServiceStub] = {}


def _stub(addr: str) -> service_pb2_grpc.MessagingServiceStub:
    with _lock:
        stub = _stubs.get(addr)
        if stub is None:
            stub = _stubs[addr] = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(addr))
        return stub


def should_forward(ctx: ServerContext) -> bool:
    """True when this broker is a controller-mode slave (sends go to the master)."""
    return ctx.master_endpoint is not None and ctx.broker.replication.role is Role.SLAVE


def forward_send(
    ctx: ServerContext, request: service_pb2.SendMessageRequest, context: grpc.ServicerContext
) -> service_pb2.SendMessageResponse | None:
    """Send ``request`` (a SendMessageRequest) on to the group's master; see the module."""
    assert ctx.master_endpoint is not None
    metadata = list(context.invocation_metadata())
    if was_forwarded(metadata):
        raise NotMasterError(
            f"broker {ctx.broker_name} at {ctx.endpoint} is a slave and got a forwarded send; retry"
        )
    forwarded = [(k, v) for k, v in metadata if not k.startswith(":")]
    forwarded.append((FORWARDED_BY, ctx.endpoint))
    deadline = time.monotonic() + _hold_s(context)
    last = "no live master known"
    while True:
        if not should_forward(ctx):
            return None  # promoted in place meanwhile: the caller stores it here
        master = ctx.master_endpoint()
        if master and master != ctx.endpoint:
            try:
                return _stub(master).SendMessage(
                    request, timeout=FORWARD_SEND_TIMEOUT_S, metadata=forwarded
                )
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:  # it may have stored it
                    raise _unreachable(ctx, master, exc.code().name) from None
                last = f"{master}: {exc.code().name}"
        if time.monotonic() >= deadline:
            raise _unreachable(ctx, master, last)
        time.sleep(HOLD_POLL_S)


def _hold_s(context: grpc.ServicerContext) -> float:
    """How long a send may wait for a master: ``FORWARD_HOLD_S``, less near the caller's
    deadline (what is left of it minus the forward's own time)."""
    remaining = context.time_remaining()
    if remaining is None:
        return FORWARD_HOLD_S
    return max(0.0, min(FORWARD_HOLD_S, remaining - 0.5))


def _unreachable(ctx: ServerContext, master: str, why: str) -> BrokerNotReachableError:
    return BrokerNotReachableError(
        f"forwarding SendMessage to the master of {ctx.broker_name} "
        f"({master or 'none known'}) failed: {why}; retry"
    )
