"""ACL evaluation, table-driven: patterns, actions, Deny wins, source IPs, super users."""

from __future__ import annotations

import pytest

from broker_core.auth.acl import Action, Rule, User, decide, matches, source_network
from broker_core.auth.resources import ADMIN, MESSAGING, requirements
from broker_core.errors import InvalidArgumentError

A = Action
ALICE = User("alice", "alice-secret")
ROOT = User("root", "root-secret", superuser=True)


def rule(resource: str, actions: str, decision: str = "Allow", *ips: str) -> Rule:
    return Rule.build(resource, actions.split(","), decision, ips)


@pytest.mark.parametrize(
    ("pattern", "kind", "name", "expected"),
    [
        ("Topic:orders", "Topic", "orders", True),
        ("Topic:orders", "Topic", "orders2", False),
        ("Topic:orders", "Group", "orders", False),
        ("Topic:ord*", "Topic", "orders", True),
        ("Topic:ord*", "Topic", "ord", True),
        ("Topic:ord*", "Topic", "payments", False),
        ("Topic:*", "Topic", "anything", True),
        ("Topic:*", "Topic", "*", True),
        ("Topic:ord*", "Topic", "*", False),  # List needs a rule over every topic
        ("Group:*", "Topic", "orders", False),
        ("*", "Group", "g", True),
    ],
)
def test_resource_patterns(pattern, kind, name, expected) -> None:
    assert matches(pattern, kind, name) is expected


CASES = [
    # rules, kind, name, actions wanted, source, allowed?
    ([rule("Topic:orders", "Pub")], "Topic", "orders", (A.PUB,), "127.0.0.1", True),
    ([rule("Topic:orders", "Pub")], "Topic", "payments", (A.PUB,), "127.0.0.1", False),
    ([rule("Topic:orders", "Pub")], "Topic", "orders", (A.SUB,), "127.0.0.1", False),
    ([rule("Topic:orders", "Pub")], "Topic", "orders", (A.SUB, A.PUB), "127.0.0.1", True),
    ([rule("Topic:orders", "All")], "Topic", "orders", (A.DELETE,), "127.0.0.1", True),
    ([], "Topic", "orders", (A.PUB,), "127.0.0.1", False),  # no rule: denied
    # Deny wins, whatever the order and however specific the Allow is
    (
        [rule("Topic:*", "Pub"), rule("Topic:payments", "Pub", "Deny")],
        "Topic",
        "payments",
        (A.PUB,),
        "127.0.0.1",
        False,
    ),
    (
        [rule("Topic:payments", "Pub", "Deny"), rule("Topic:payments", "Pub")],
        "Topic",
        "payments",
        (A.PUB,),
        "127.0.0.1",
        False,
    ),
    (
        [rule("Topic:payments", "Pub"), rule("*", "All", "Deny")],
        "Topic",
        "payments",
        (A.PUB,),
        "127.0.0.1",
        False,
    ),
    (
        [rule("Topic:*", "Pub"), rule("Topic:payments", "Pub", "Deny")],
        "Topic",
        "orders",
        (A.PUB,),
        "127.0.0.1",
        True,
    ),
    # a Deny of one action leaves another allowed action usable
    (
        [rule("Topic:t", "Pub,Sub"), rule("Topic:t", "Pub", "Deny")],
        "Topic",
        "t",
        (A.PUB, A.SUB),
        "127.0.0.1",
        True,
    ),
    # source IP ranges
    ([rule("Topic:t", "Pub", "Allow", "10.0.0.0/8")], "Topic", "t", (A.PUB,), "10.1.2.3", True),
    ([rule("Topic:t", "Pub", "Allow", "10.0.0.0/8")], "Topic", "t", (A.PUB,), "127.0.0.1", False),
    ([rule("Topic:t", "Pub", "Allow", "10.0.0.0/8")], "Topic", "t", (A.PUB,), None, False),
    ([rule("Topic:t", "Pub", "Allow", "::1")], "Topic", "t", (A.PUB,), "::1", True),
    (
        [rule("Topic:t", "Pub"), rule("Topic:t", "Pub", "Deny", "192.168.0.0/16")],
        "Topic",
        "t",
        (A.PUB,),
        "192.168.5.5",
        False,
    ),
    (
        [rule("Topic:t", "Pub"), rule("Topic:t", "Pub", "Deny", "192.168.0.0/16")],
        "Topic",
        "t",
        (A.PUB,),
        "10.0.0.1",
        True,
    ),
    ([rule("Group:GID_*", "Sub")], "Group", "GID_a", (A.SUB,), "127.0.0.1", True),
]


@pytest.mark.parametrize(("rules", "kind", "name", "actions", "ip", "allowed"), CASES)
def test_decisions(rules, kind, name, actions, ip, allowed) -> None:
    assert decide(ALICE, rules, kind, name, actions, source_network(ip)) is allowed


def test_super_user_is_allowed_everything_even_against_deny() -> None:
    deny_all = [rule("*", "All", "Deny")]
    assert decide(ROOT, deny_all, "Topic", "x", (A.DELETE,), None)


@pytest.mark.parametrize(
    ("resource", "actions", "decision", "ips"),
    [
        ("Queue:x", "Pub", "Allow", ()),
        ("Topic:", "Pub", "Allow", ()),
        ("Topic:a*b", "Pub", "Allow", ()),
        ("Topic:x", "Publish", "Allow", ()),
        ("Topic:x", "", "Allow", ()),
        ("Topic:x", "Pub", "Maybe", ()),
        ("Topic:x", "Pub", "Allow", ("10.0.0.0/33",)),
    ],
)
def test_bad_rules_are_refused(resource, actions, decision, ips) -> None:
    with pytest.raises(InvalidArgumentError):
        Rule.build(resource, [a for a in actions.split(",") if a], decision, ips)


def test_rules_round_trip_through_json() -> None:
    original = rule("Topic:ord*", "Pub,Sub", "Deny", "10.0.0.0/8")
    assert Rule.from_dict(original.to_dict()) == original


def test_what_calls_need() -> None:
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2

    send = service_pb2.SendMessageRequest(
        messages=[
            pb.Message(topic=pb.Resource(name="b")),
            pb.Message(topic=pb.Resource(name="a")),
            pb.Message(topic=pb.Resource(name="b")),
        ]
    )
    assert requirements(MESSAGING, "SendMessage", send) == [
        ("Topic", "a", (A.PUB,)),
        ("Topic", "b", (A.PUB,)),
    ]
    assert requirements(ADMIN, "DeleteTopic", b'{"name": "t"}') == [("Topic", "t", (A.DELETE,))]
    assert requirements(ADMIN, "ListGroups", b"") == [("Group", "*", (A.LIST,))]
    assert requirements(ADMIN, "CreateUser", b"{}") is None  # super users only
    assert requirements(ADMIN, "SomeFutureVerb", b"{}") is None
    assert requirements(ADMIN, "CreateTopic", b"\xff not json") == [
        ("Topic", "", (A.CREATE, A.UPDATE))
    ]
