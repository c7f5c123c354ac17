"""``NameServerClient``: register brokers with, and read routes from, NameServers.

The client holds one persistent connection per NameServer (``"h:p;h:p"``), opened on first
use and re-opened after a break. Brokers register over it, so a NameServer drops a broker
the moment its process dies and the connection closes. Registration goes to **every**
NameServer in parallel (they are independent); reads ask the NameServers in order and
take the first answer. Thread-safe.

Example::

    ns = NameServerClient("127.0.0.1:9876")
    ns.register_broker(BrokerRegistration(
        cluster="DefaultCluster", broker_name="a", broker_id=0, broker_addr="127.0.0.1:8081",
        grpc_addr="127.0.0.1:8081", ha_addr="", topics={"orders": TopicQueueConfig(4, 4)},
        data_version=DataVersion(0, 1_700_000_000_000, 1)))
    route = ns.get_route("orders")     # TopicRoute(queue_datas=[...], broker_datas=[...])
    ns.close()
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from broker_core.errors import (
    ConfigError,
    RemotingCommandError,
    RemotingConnectError,
    RemotingError,
    TopicNotFoundError,
)
from broker_core.namesrv import wire
from broker_core.namesrv.model import (
    BrokerData,
    BrokerLive,
    BrokerRegistration,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterResult,
    TopicQueueConfig,
    TopicRoute,
)
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.tls import client_context_from_env

__all__ = [
    "BrokerData",
    "BrokerLive",
    "BrokerRegistration",
    "ClusterInfo",
    "DataVersion",
    "NameServerClient",
    "QueueData",
    "RegisterResult",
    "TopicQueueConfig",
    "TopicRoute",
    "parse_addrs",
]

T = TypeVar("T")


def parse_addrs(addrs: str | Sequence[str]) -> list[str]:
    """``"h:p;h:p"`` (or ``,``-separated, or a list) -> ``["h:p", "h:p"]``; never empty."""
    parts = addrs.replace(",", ";").split(";") if isinstance(addrs, str) else list(addrs)
    result = [p.strip() for p in parts if p.strip()]
    if not result:
        raise ConfigError(f"no NameServer address in {addrs!r}")
    return result


class NameServerClient:
    """Talks to one or more independent NameServers (see the module docstring)."""

    def __init__(
        self,
        addrs: str | Sequence[str],
        timeout_s: float = 3.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: TLS to the NameServers; None takes the one the environment asks
        for (``RMQ_CA_FILE``/``RMQ_TLS``, see ``remoting/tls.py``), else plain TCP."""
        self.addrs = parse_addrs(addrs)
        context = ssl_context if ssl_context is not None else client_context_from_env()
        self._clients = [
            RemotingClient(addr, timeout_s, ssl_context=context) for addr in self.addrs
        ]
        self._pool = ThreadPoolExecutor(len(self._clients), thread_name_prefix="namesrv-client")

    # ---- broker side ----------------------------------------------------------------------

    def register_broker(self, reg: BrokerRegistration) -> list[str]:
        """Register with every NameServer at once; per NameServer ``""`` or the error text.

        Raises only if every NameServer failed: ``RemotingCommandError`` if any of them
        refused the registration (e.g. a stale data version), else ``RemotingConnectError``.
        """
        results = self.register_broker_results(reg)
        texts = ["" if isinstance(r, RegisterResult) else str(r) for r in results]
        errors = [r for r in results if isinstance(r, RemotingError)]
        if len(errors) == len(results):
            raise _all_failed("registration with every NameServer failed", errors)
        return texts

    def register_broker_results(
        self, reg: BrokerRegistration
    ) -> list[RegisterResult | RemotingError]:
        """Like ``register_broker`` but returns each NameServer's result (master address)."""
        fields, body = wire.registration_fields(reg), wire.registration_body(reg)

        def one(client: RemotingClient) -> RegisterResult:
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)
            resp = _checked(client, _invoke_once_more(client, request))
            master = resp.ext_fields.get("masterAddr", "")
            return RegisterResult(master, resp.ext_fields.get("haServerAddr", ""))

        return self._on_every(one)

    def unregister_broker(
        self, cluster: str, broker_name: str, broker_id: int, broker_addr: str
    ) -> None:
        """Unregister from every NameServer (best effort: unreachable ones expire it later)."""
        fields = {
            "clusterName": cluster,
            "brokerName": broker_name,
            "brokerId": str(broker_id),
            "brokerAddr": broker_addr,
        }

        def one(client: RemotingClient) -> None:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields)
            _checked(client, client.invoke(request))

        self._on_every(one)

    def broker_heartbeat(
        self, cluster: str, broker_name: str, broker_id: int, broker_addr: str
    ) -> None:
        """BROKER_HEARTBEAT (oneway) to every NameServer: refreshes a registration between
        full re-registrations. Best effort: a NameServer that cannot be reached is skipped."""
        fields = {
            "clusterName": cluster,
            "brokerName": broker_name,
            "brokerId": str(broker_id),
            "brokerAddr": broker_addr,
        }

        def one(client: RemotingClient) -> None:
            client.invoke_oneway(RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, fields))

        self._on_every(one)

    # ---- reads ----------------------------------------------------------------------------

    def get_route(self, topic: str) -> TopicRoute:
        """The topic's route; ``TopicNotFoundError`` if the answering NameServer has none."""
        fields = {"topic": topic, "acceptStandardJsonOnly": "true"}
        resp = self._first_answer(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotFoundError(resp.remark or f"no route for topic {topic!r}")
        return wire.route_from(topic, resp.body)

    def get_cluster_info(self) -> ClusterInfo:
        resp = self._first_answer(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        return wire.cluster_info_from(resp.body)

    def get_all_topics(self) -> list[str]:
        resp = self._first_answer(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        return wire.topic_list_from(resp.body)

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._pool.shutdown(wait=False)

    # ---- internals --------------------------------------------------------------------------

    def _on_every(self, call: Callable[[RemotingClient], T]) -> list[T | RemotingError]:
        futures = [self._pool.submit(call, client) for client in self._clients]
        results: list[T | RemotingError] = []
        for future in futures:
            try:
                results.append(future.result())
            except RemotingError as exc:
                results.append(exc)
        return results

    def _first_answer(self, code: int, fields: dict[str, str]) -> RemotingCommand:
        """The first NameServer's answer (SUCCESS or TOPIC_NOT_EXIST); others on failure."""
        errors: list[str] = []
        for client in self._clients:
            try:
                resp = _invoke_once_more(client, RemotingCommand.request(code, fields))
                if resp.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST):
                    return resp
                errors.append(f"{client.addr}: code {resp.code}: {resp.remark}")
            except RemotingError as exc:
                errors.append(f"{client.addr}: {exc}")
        raise RemotingConnectError(f"no NameServer answered request {code}: {'; '.join(errors)}")


def _invoke_once_more(client: RemotingClient, request: RemotingCommand) -> RemotingCommand:
    """Invoke; if a kept-alive connection turned out to be dead, reconnect and retry once.

    Every NameServer request is idempotent, so sending it twice is harmless.
    """
    try:
        return client.invoke(request)
    except RemotingConnectError:
        retry = RemotingCommand.request(request.code, request.ext_fields, request.body)
        return client.invoke(retry)


def _all_failed(what: str, errors: list[RemotingError]) -> RemotingError:
    """One error for several NameServers' failures: a refusal if any refused, else connect."""
    message = f"{what}: {'; '.join(str(e) for e in errors)}"
    refusals = [e for e in errors if isinstance(e, RemotingCommandError)]
    if refusals:
        return RemotingCommandError(message, code=refusals[0].code, remark=refusals[0].remark)
    return RemotingConnectError(message)


def _checked(client: RemotingClient, resp: RemotingCommand) -> RemotingCommand:
    if resp.code != ResponseCode.SUCCESS:
        raise RemotingCommandError(
            f"{client.addr}: code {resp.code}: {resp.remark}", code=resp.code, remark=resp.remark
        )
    return resp
