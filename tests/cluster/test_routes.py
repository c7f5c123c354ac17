"""``cluster.routes.brokers_of``: each broker group of a topic's route, with its master's
gRPC address and every member's (what QueryRoute lists for a group in controller mode)."""

from __future__ import annotations

from broker_core.cluster.routes import brokers_of
from broker_core.namesrv.model import BrokerData, QueueData, TopicRoute


def _route() -> TopicRoute:
    return TopicRoute(
        "t",
        [QueueData("b", 4, 4, 6), QueueData("a", 2, 2, 6), QueueData("c", 1, 1, 6)],
        [
            BrokerData(
                "C", "b", {2: "h:12", 0: "h:10", 1: "h:11"}, {2: "g:22", 0: "g:20", 1: "g:21"}
            ),
            BrokerData("C", "a", {1: "h:1"}, {1: "g:1"}),  # its master is gone
            BrokerData("C", "c", {0: "h:30"}, {0: "g:30"}),
        ],
    )


def test_groups_with_a_master_list_every_member_master_first() -> None:
    groups = brokers_of(_route())
    assert [g.broker_name for g in groups] == ["b", "c"]  # "a" has no master: not routed
    b, c = groups
    assert (b.grpc_addr, b.group_addrs) == ("g:20", ("g:20", "g:21", "g:22"))
    assert (b.read_queue_nums, b.write_queue_nums, b.perm) == (4, 4, 6)
    assert (c.grpc_addr, c.group_addrs) == ("g:30", ("g:30",))
