"""ACL 2.0-style authorization: users, rules and the decision (pure, no I/O).

A **user** is an access key with a secret key, either a *super user* (allowed
everything, manages users and ACLs) or a normal user whose rights are its **rules**.
A rule names

* a resource pattern: ``Topic:orders`` (exactly), ``Topic:order*`` (prefix),
  ``Topic:*`` (any topic); the same for ``Group:``; ``*`` matches every resource;
* actions: ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``, ``List``,
  or ``All`` (every one of them);
* a decision, ``Allow`` or ``Deny``;
* optionally source IP ranges (``10.0.0.0/8``, ``192.168.1.7``, IPv6 too): the rule
  applies only to requests from there.

:func:`decide` allows a request when some rule of the user that matches it (resource,
action and source) allows it and **none denies it: Deny wins**, whatever the order or
specificity of the rules. No matching rule means denied.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from broker_core.errors import InvalidArgumentError

RESOURCE_TYPES: Final = ("Topic", "Group")


class Action(StrEnum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"


class Decision(StrEnum):
    ALLOW = "Allow"
    DENY = "Deny"


def parse_action(text: str) -> Action:
    for action in Action:
        if action.value.lower() == text.strip().lower():
            return action
    raise InvalidArgumentError(
        f"unknown action {text!r}; use one of {', '.join(a.value for a in Action)}"
    )


def parse_decision(text: str) -> Decision:
    for decision in Decision:
        if decision.value.lower() == text.strip().lower():
            return decision
    raise InvalidArgumentError(f"decision must be Allow or Deny, got {text!r}")


def check_pattern(pattern: str) -> str:
    """A resource pattern as given if valid (see the module docstring); else an error."""
    if pattern == "*":
        return pattern
    kind, sep, name = pattern.partition(":")
    if not sep or kind not in RESOURCE_TYPES or not name or "*" in name[:-1]:
        raise InvalidArgumentError(
            f"resource must be Topic:NAME, Group:NAME, Topic:PREFIX*, Topic:* (or Group:…) or "
            f"*, got {pattern!r}"
        )
    return pattern


def matches(pattern: str, kind: str, name: str) -> bool:
    """Does ``pattern`` cover the resource ``kind:name``?"""
    if pattern == "*":
        return True
    want_kind, _, want = pattern.partition(":")
    if want_kind != kind:
        return False
    if want.endswith("*"):
        return name.startswith(want[:-1])
    return want == name


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(ranges: Iterable[str]) -> tuple[Network, ...]:
    nets = []
    for text in ranges:
        try:
            nets.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise InvalidArgumentError(
                f"source IP range must be an address or CIDR, got {text!r}"
            ) from None
    return tuple(nets)


@dataclass(frozen=True, slots=True)
class Rule:
    """One policy entry of a user (see the module docstring)."""

    resource: str
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: tuple[str, ...] = ()
    networks: tuple[Network, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def build(
        cls,
        resource: str,
        actions: Iterable[str | Action],
        decision: str | Decision,
        source_ips: Sequence[str] = (),
    ) -> Rule:
        """A checked rule; InvalidArgumentError names what is wrong."""
        parsed = frozenset(a if isinstance(a, Action) else parse_action(a) for a in actions)
        if not parsed:
            raise InvalidArgumentError("a rule needs at least one action")
        ips = tuple(s.strip() for s in source_ips if s.strip())
        return cls(
            check_pattern(resource.strip()),
            parsed,
            decision if isinstance(decision, Decision) else parse_decision(decision),
            ips,
            parse_networks(ips),
        )

    def covers(self, kind: str, name: str, action: Action, source: Network | None) -> bool:
        if Action.ALL not in self.actions and action not in self.actions:
            return False
        if not matches(self.resource, kind, name):
            return False
        if not self.networks:
            return True
        if source is None:
            return False
        return any(
            source.version == net.version and source.subnet_of(net)  # type: ignore[arg-type]
            for net in self.networks
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "actions": sorted(a.value for a in self.actions),
            "decision": self.decision.value,
            "source_ips": list(self.source_ips),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        return cls.build(
            data["resource"], data["actions"], data["decision"], data.get("source_ips", ())
        )


@dataclass(frozen=True, slots=True)
class User:
    access_key: str
    secret_key: str
    superuser: bool = False


def source_network(peer_ip: str | None) -> Network | None:
    """The caller's address as a one-address network (None when unknown or not an IP)."""
    if not peer_ip:
        return None
    try:
        return ipaddress.ip_network(peer_ip)
    except ValueError:
        return None


def decide(
    user: User,
    rules: Iterable[Rule],
    kind: str,
    name: str,
    actions: Iterable[Action],
    source: Network | None,
) -> bool:
    """Is ``user`` allowed one of ``actions`` on ``kind:name`` from ``source``?

    Super users: always. Otherwise an action is allowed when a matching rule allows it
    and no matching rule denies it; the request is allowed if any of ``actions`` is.
    """
    if user.superuser:
        return True
    rules = list(rules)
    for action in actions:
        verdicts = {r.decision for r in rules if r.covers(kind, name, action, source)}
        if Decision.ALLOW in verdicts and Decision.DENY not in verdicts:
            return True
    return False


def validate_access_key(access_key: str) -> str:
    if (
        not access_key
        or len(access_key) > 64
        or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in access_key)
    ):
        raise InvalidArgumentError(
            f"access key must be 1..64 characters of A-Z a-z 0-9 - _ ., got {access_key!r}"
        )
    return access_key


def validate_secret_key(secret_key: str) -> str:
    if not 6 <= len(secret_key) <= 256 or not secret_key.isprintable():
        raise InvalidArgumentError("secret key must be 6..256 printable characters")
    return secret_key
