"""The broker's registration with its NameServers (RocketMQ's ``registerBrokerAll``).

A :class:`RegistrationService` runs one thread in the broker process. Contract:

* ``start()`` first refuses a name clash: if a NameServer already lists a *live* broker
  of the same name at another address, :class:`~broker_core.errors.ConfigError` names
  it and the broker does not start. Then it registers once (a NameServer that cannot be
  reached is logged and retried; the broker still starts, as RocketMQ's does).
* It re-registers with **every** NameServer every ``interval_ms`` and at once after
  any change of the topic table (the table's listener sets an event; changes that come
  in a burst make one registration).
* ``stop()`` unregisters from every NameServer (errors logged, not raised) and closes
  the connections. A broker that dies without ``stop()`` drops its connections, and the
  NameServers forget it at once.

The registration carries every topic but the broker's internal ones (schedule, timer,
transaction, revive), retry and dead-letter topics included so their readers can route.
The data version's counter grows with every topic change; its timestamp is the start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.broker.broker import Broker
from broker_core.broker.system_topics import is_system_topic
from broker_core.errors import ConfigError, RocketMQError
from broker_core.namesrv.client import (
    BrokerRegistration,
    DataVersion,
    NameServerClient,
    TopicQueueConfig,
)
from broker_core.protocol.trace import TRACE_TOPIC
from broker_core.service_thread import ServiceThread

log = logging.getLogger(__name__)

DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_REGISTER_INTERVAL_MS = 30_000


def default_broker_name(store_dir: str) -> str:
    """A name unique to this host and store directory, the same after a restart (pure
    but for the host name): ``broker-<host>-<8 hex digits of the store's path>``."""
    digest = hashlib.sha1(os.path.abspath(store_dir).encode()).hexdigest()[:8]
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"broker-{host[:40]}-{digest}"


@dataclass(frozen=True)
class BrokerIdentity:
    """Who this broker is in the cluster, and where clients and brokers reach it."""

    cluster: str
    broker_name: str
    grpc_addr: str
    broker_id: int = 0  # RocketMQ's master id
    remoting_addr: str = ""  # where 4.x clients connect ("" without a remoting listener)

    @property
    def broker_addr(self) -> str:
        """The address NameServers key this broker by: its remoting listener (what 4.x
        clients connect to), else its gRPC one."""
        return self.remoting_addr or self.grpc_addr


class RegistrationService:
    """Keeps one broker registered with every NameServer; see the module docstring."""

    def __init__(
        self,
        broker: Broker,
        identity: BrokerIdentity,
        namesrv: str,
        *,
        interval_ms: int = DEFAULT_REGISTER_INTERVAL_MS,
        client_factory: Callable[[str], NameServerClient] = NameServerClient,
    ) -> None:
        if interval_ms < 10:
            raise ConfigError(f"register interval must be ≥ 10 ms, got {interval_ms}")
        self.broker = broker
        self.identity = identity
        self.interval_ms = interval_ms
        self._client = client_factory(namesrv)
        # Registers every ``interval_ms`` and at once when topics change (``wake``); a
        # failed round is logged and retried: the heartbeat thread never dies of one.
        self.thread = ServiceThread("namesrv-register", self.register_now, interval_ms=interval_ms)
        self._started_ms = int(time.time() * 1000)
        self._counter = 0
        self._counter_lock = threading.Lock()
        self.registrations = 0  # successful rounds, for health and tests
        self.last_errors: list[str] = []
        broker.topics.add_listener(self._on_topic_change)

    def _on_topic_change(self) -> None:
        with self._counter_lock:
            self._counter += 1
        self.thread.wake()

    def registration(self) -> BrokerRegistration:
        """What the next registration sends: the topic table and a data version."""
        topics = {
            t.name: TopicQueueConfig(
                t.read_queue_nums, t.write_queue_nums, t.perm, order=t.message_type == "FIFO"
            )
            for t in self.broker.topics.list()
            if not is_system_topic(t.name) or t.name == TRACE_TOPIC  # the clients send traces
        }
        with self._counter_lock:
            version = DataVersion(0, self._started_ms, self._counter)
        ident = self.identity
        return BrokerRegistration(
            ident.cluster,
            ident.broker_name,
            ident.broker_id,
            ident.broker_addr,
            ident.grpc_addr,
            "",
            topics,
            version,
        )

    def check_name_free(self) -> None:
        """ConfigError if a live broker elsewhere already uses this broker's name."""
        try:
            info = self._client.get_cluster_info()
        except RocketMQError as exc:
            log.warning("cannot check the broker name with the NameServers: %s", exc)
            return
        ident = self.identity
        for live in info.live:
            if (
                live.broker_name == ident.broker_name
                and live.broker_id == ident.broker_id
                and live.broker_addr != ident.broker_addr
            ):
                raise ConfigError(
                    f"broker name {ident.broker_name!r} is already used by the live broker at "
                    f"{live.broker_addr} (cluster {live.cluster}); give this broker another "
                    "--broker-name"
                )

    def register_now(self) -> bool:
        """One registration round with every NameServer; True if at least one took it."""
        try:
            errors = self._client.register_broker(self.registration())
        except RocketMQError as exc:
            self.last_errors = [str(exc)]
            log.warning("registration with every NameServer failed: %s", exc)
            return False
        self.last_errors = [e for e in errors if e]
        for error in self.last_errors:
            log.warning("a NameServer refused the registration: %s", error)
        if len(self.last_errors) == len(errors):
            return False
        self.registrations += 1
        return True

    def start(self) -> None:
        """Check the name, register once, then keep registering in a thread."""
        self.check_name_free()
        self.register_now()
        self.thread.start()

    def stop(self) -> None:
        """Stop the thread, unregister from every NameServer, close the connections."""
        self.thread.stop()
        ident = self.identity
        try:
            self._client.unregister_broker(
                ident.cluster, ident.broker_name, ident.broker_id, ident.broker_addr
            )
        except RocketMQError as exc:
            log.warning("unregistering from the NameServers failed: %s", exc)
        finally:
            self._client.close()
