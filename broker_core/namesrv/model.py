"""The NameServer's data, as the NameServer client and the route table see it.

These frozen dataclasses are the contract shared with the broker (registration) and the
clients (routes); ``broker_core.namesrv.client`` re-exports them. Broker ids follow
RocketMQ: 0 is the master of a broker group, >0 a slave. Addresses are ``"host:port"``:
``broker_addrs`` the brokers' remoting (or, until they have one, gRPC) addresses,
``grpc_addrs`` their gRPC endpoints (our extension of RocketMQ's ``BrokerData``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core.protocol.perm import Perm

MASTER_ID = 0
PERM_READ_WRITE = Perm.READ_WRITE
DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_HEARTBEAT_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class QueueData:
    """One broker group's queues of a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True)
class BrokerData:
    """One broker group: its replicas' addresses by broker id."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]
    grpc_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True)
class TopicRoute:
    """Where a topic's queues are: one ``QueueData`` and one ``BrokerData`` per group."""

    topic: str
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


@dataclass(frozen=True)
class TopicQueueConfig:
    """A topic as one broker registers it (RocketMQ's ``TopicConfig``)."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    order: bool = False


@dataclass(frozen=True, order=True)
class DataVersion:
    """Version of a broker's topic table: changes whenever the table changes.

    ``state_version`` orders registrations that claim the same broker id from different
    addresses: the NameServer refuses the one with the older ``state_version``.
    """

    state_version: int
    timestamp_ms: int
    counter: int


@dataclass(frozen=True)
class BrokerRegistration:
    """What a broker sends in REGISTER_BROKER (header fields plus its topic table)."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    grpc_addr: str
    ha_addr: str
    topics: dict[str, TopicQueueConfig]
    data_version: DataVersion
    heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS


@dataclass(frozen=True)
class BrokerLive:
    """A registered broker replica and when the NameServer last heard from it."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    grpc_addr: str
    last_update_ms: int
    data_version: DataVersion


@dataclass(frozen=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: broker groups by name, group names by cluster, live replicas."""

    brokers: dict[str, BrokerData]
    clusters: dict[str, list[str]]
    live: list[BrokerLive] = field(default_factory=list)


@dataclass(frozen=True)
class RegisterResult:
    """The NameServer's answer to a registration: the group's master, for a slave's HA."""

    master_addr: str = ""
    ha_server_addr: str = ""
