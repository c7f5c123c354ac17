"""QueryRoute and QueryAssignment answers for the whole cluster (RocketMQ 5 "local proxy").

When the broker runs with NameServers (``ctx.routes`` is set), a topic's queues are
those of every broker group the NameServers list for it, each ``MessageQueue`` carrying
its own broker's name and gRPC endpoints, so a client that dialled one broker sends to
and receives from all of them. In controller mode a group's endpoints list all its
members (``group_endpoints``), and this broker's own group answers with the endpoints
the client dialled (``query_route.broker_endpoints``): either way a failover inside a
group needs no route refresh. This broker's own share comes from its topic table (it
is fresher than the NameServers' copy); when the NameServers cannot be reached, the
answer is this broker's share alone (a cluster with its NameServers down still serves
what each broker holds). The accepted message types of every group's queues are this
broker's setting for the topic when it has one, else MIXED.

Assignments share all groups' readable queues among the group's live consumers as
this broker knows them (the official clients heartbeat every broker of their routes).
"""

from __future__ import annotations

import logging

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.topics import MIXED, Perm, TopicConfig
from broker_core.cluster.routes import BrokerQueues
from broker_core.errors import RocketMQError, TopicNotFoundError
from broker_core.server.context import ServerContext
from broker_core.server.handlers.common import broker_proto, message_queue_proto, scheme_of

log = logging.getLogger(__name__)


def _endpoints(*addrs: str) -> pb.Endpoints:
    """``Endpoints`` listing ``addrs`` in order (the scheme is the first host's)."""
    hosts = [(host.strip("[]"), int(port)) for host, _, port in (a.rpartition(":") for a in addrs)]
    return pb.Endpoints(
        scheme=scheme_of(hosts[0][0]), addresses=[pb.Address(host=h, port=p) for h, p in hosts]
    )


def group_endpoints(ctx: ServerContext, group: BrokerQueues) -> pb.Endpoints:
    """Where a client reaches another broker group: its master, or in controller mode
    every registered member, master first. The client keeps one channel per ``Endpoints``
    and gRPC moves it to the next address when one dies; a slave forwards sends to its
    master and becomes the master on a failover (``server/master_forward.py``), so the
    client reaches the group across a failover without waiting for its route refresh
    (30 s), as RocketMQ 5's cluster-mode proxy hides the master behind a stable endpoint."""
    if ctx.master_endpoint is not None and group.group_addrs:
        return _endpoints(*group.group_addrs)
    return _endpoints(group.grpc_addr)


def _groups(ctx: ServerContext, topic: str) -> list[tuple[TopicConfig, pb.Broker | None]]:
    """(config, Broker proto) of every broker group holding ``topic``; TopicNotFoundError
    when none does."""
    assert ctx.routes is not None
    local = ctx.broker.topics.get(topic)
    message_type = local.message_type if local is not None else MIXED
    try:
        remote: list[BrokerQueues] = ctx.routes.brokers(topic)
    except TopicNotFoundError:
        remote = []
    except RocketMQError as exc:  # NameServers unreachable: serve our own share
        log.debug("route of %s from the NameServers failed (%s); answering locally", topic, exc)
        remote = []
    groups: list[tuple[TopicConfig, pb.Broker | None]] = []
    if local is not None:
        groups.append((local, None))
    for b in remote:
        if b.broker_name == ctx.broker_name:
            continue
        config = TopicConfig(topic, b.read_queue_nums, b.write_queue_nums, b.perm, message_type)
        groups.append(
            (config, pb.Broker(name=b.broker_name, id=0, endpoints=group_endpoints(ctx, b)))
        )
    if not groups:
        raise TopicNotFoundError(f"topic {topic!r} does not exist on any broker of the cluster")
    return groups


def route_queues(
    ctx: ServerContext, topic: str, namespace: str, access_point: pb.Endpoints | None
) -> list[pb.MessageQueue]:
    """Every readable or writable queue of ``topic`` in the cluster, as ``MessageQueue``s.

    Queues are interleaved across broker groups (queue 0 of each group, then queue 1,
    ...): the official producer retries a failed send on the *next* queue of the list,
    so a dead group's neighbour in the list is always another group.
    """
    per_group = []
    for config, broker in _groups(ctx, topic):
        broker = broker if broker is not None else broker_proto(ctx, access_point)
        queues = [
            message_queue_proto(config, q, broker, namespace)
            for q in range(max(config.read_queue_nums, config.write_queue_nums))
        ]
        per_group.append([q for q in queues if q.permission != pb.Permission.NONE])
    depth = max((len(g) for g in per_group), default=0)
    return [g[i] for i in range(depth) for g in per_group if i < len(g)]


def assignment_queues(
    ctx: ServerContext,
    group: str,
    topic: str,
    client_id: str,
    namespace: str,
    access_point: pb.Endpoints | None,
) -> list[pb.MessageQueue]:
    """``client_id``'s share of the readable queues of every broker group of ``topic``."""
    groups = _groups(ctx, topic)
    by_name = {}
    queues: list[MessageQueue] = []
    for config, broker in groups:
        broker = broker if broker is not None else broker_proto(ctx, access_point)
        by_name[broker.name] = (config, broker)
        if Perm.readable(config.perm):
            queues += config.read_queues(broker.name)
    settings = ctx.broker.group(group)
    mine = ctx.broker.clients.assignment(
        group, topic, client_id, queues, settings.rebalance_strategy, broadcast=settings.broadcast
    )
    out = []
    for mq in mine:
        config, broker = by_name[mq.broker_name]
        out.append(message_queue_proto(config, mq.queue_id, broker, namespace))
    return out
