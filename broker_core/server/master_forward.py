"""Controller mode: a slave forwards a producer's send to its group's current master.

RocketMQ 5's cluster-mode proxy idea for one broker group: the official client is given
every broker's endpoint (``"h:p1;h:p2"``) and QueryRoute answers with exactly that access
point (``handlers/common.broker_endpoints``), so the client keeps one channel to the whole group
and never learns which broker is master. Whichever broker the channel reaches answers:
the master stores the message, a slave sends the call on, once, to the master it knows
from etcd (``ControllerAgent.master_endpoint``) with ``x-mq-forwarded-by`` set.

Contract of :func:`forward_send`: the master's response, or NotMasterError (no master
known, or the call was itself forwarded: no loops) or BrokerNotReachableError (the master
did not answer; PROXY_TIMEOUT, which the client retries) — never a partial answer.
"""

from __future__ import annotations

import threading
from typing import Final

import grpc
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.cluster.forward import FORWARDED_BY, was_forwarded
from broker_core.errors import BrokerNotReachableError, NotMasterError
from broker_core.server.context import ServerContext

FORWARD_SEND_TIMEOUT_S: Final = 5.0

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
    return ctx.master_endpoint is not None and ctx.broker.replication.is_slave


def forward_send(
    ctx: ServerContext, request: service_pb2.SendMessageRequest, context: grpc.ServicerContext
) -> service_pb2.SendMessageResponse:
    """Send ``request`` (a SendMessageRequest) on to the group's master; see the module."""
    assert ctx.master_endpoint is not None
    metadata = list(context.invocation_metadata())
    master = ctx.master_endpoint()
    if was_forwarded(metadata) or not master or master == ctx.endpoint:
        raise NotMasterError(
            f"broker {ctx.broker_name} at {ctx.endpoint} is a slave and "
            "knows no live master to forward the send to; retry"
        )
    forwarded = [(k, v) for k, v in metadata if not k.startswith(":")]
    forwarded.append((FORWARDED_BY, ctx.endpoint))
    try:
        return _stub(master).SendMessage(
            request, timeout=FORWARD_SEND_TIMEOUT_S, metadata=forwarded
        )
    except grpc.RpcError as exc:
        raise BrokerNotReachableError(
            f"forwarding SendMessage to the master of "
            f"{ctx.broker_name} at {master} failed: "
            f"{exc.code().name}; retry"
        ) from None
