"""Forward a call on a delivery to the broker that made it (Ack, ChangeInvisibleDuration).

Receipt handles name the broker group that issued them. A call that reaches another
broker of the cluster is sent on, once, to that group's master over gRPC, with the
caller's metadata plus ``x-mq-forwarded-by``; a forwarded call is never forwarded again
(a loop or a stale route answers with an error naming the broker instead). Channels are
cached per address. Contract of :meth:`Forwarder.call`: the remote response, or
:class:`ForwardError` whose message names the broker and why it was not reached.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker_core.cluster.routes import ClusterRoutes
from broker_core.errors import BrokerNotReachableError, RocketMQError

FORWARDED_BY: Final = "x-mq-forwarded-by"
FORWARD_TIMEOUT_S: Final = 5.0


ForwardError = BrokerNotReachableError


def was_forwarded(metadata: Sequence[tuple[str, Any]]) -> bool:
    """True if the call came from another broker's forwarder (pure)."""
    return any(key == FORWARDED_BY for key, _ in metadata)


class Forwarder:
    """Sends calls on to other brokers of the cluster; thread-safe."""

    def __init__(self, routes: ClusterRoutes, own_name: str) -> None:
        self.routes = routes
        self.own_name = own_name
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, Any]] = {}

    def _stub(self, addr: str) -> Any:
        with self._lock:
            entry = self._stubs.get(addr)
            if entry is None:
                channel = grpc.insecure_channel(addr)
                stub = service_pb2_grpc.MessagingServiceStub(channel)
                entry = self._stubs[addr] = (channel, stub)
            return entry[1]

    def call(
        self, broker_name: str, method: str, request: Any, metadata: Sequence[tuple[str, Any]]
    ) -> Any:
        """Call ``method`` on broker group ``broker_name``; ForwardError when impossible."""
        if was_forwarded(metadata):
            raise ForwardError(
                f"the receipt handle is from broker {broker_name!r}, and this "
                f"broker ({self.own_name}) was reached by a forwarded call; "
                f"send it to {broker_name!r}"
            )
        try:
            addr = self.routes.grpc_addr(broker_name)
        except RocketMQError as exc:
            raise ForwardError(
                f"the receipt handle is from broker {broker_name!r}, which "
                f"cannot be looked up: {exc}"
            ) from exc
        if addr is None:
            raise ForwardError(
                f"the receipt handle is from broker {broker_name!r}, which is "
                "not a live broker of the cluster"
            )
        forwarded = [(k, v) for k, v in metadata if not k.startswith(":")]
        forwarded.append((FORWARDED_BY, self.own_name))
        try:
            return getattr(self._stub(addr), method)(
                request, timeout=FORWARD_TIMEOUT_S, metadata=forwarded
            )
        except grpc.RpcError as exc:
            raise ForwardError(
                f"forwarding {method} to broker {broker_name!r} at {addr} failed: {exc.code().name}"
            ) from None

    def close(self) -> None:
        with self._lock:
            stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            channel.close()
