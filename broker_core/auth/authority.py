"""Authentication and authorization of one call, from the user table and the config."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker_core.auth.acl import User, decide, source_network
from broker_core.auth.config import AuthConfig
from broker_core.auth.resources import Need, requirements
from broker_core.auth.signature import Verifier
from broker_core.auth.store import AuthStore
from broker_core.errors import AccessDeniedError, UnauthorizedError


class Authority:
    """Decides whether a call is signed by a known user and whether its rules allow it."""

    def __init__(self, store: AuthStore, config: AuthConfig) -> None:
        self.store = store
        self.config = config
        self.verifier = Verifier(
            store.secret_of,
            max_skew_ms=config.max_clock_skew_ms,
            accept_local_time=config.accept_local_time,
        )

    def authenticate(self, metadata: Iterable[tuple[str, Any]]) -> User:
        """The user who signed the call; UnauthorizedError otherwise."""
        access_key = self.verifier.verify(metadata)
        user = self.store.user(access_key)
        if user is None:  # deleted between the two reads
            raise UnauthorizedError(f"unknown access key {access_key!r}")
        return user

    def authorize(
        self, user: User, service: str, method: str, request: Any, peer_ip: str | None
    ) -> None:
        """AccessDeniedError unless ``user``'s rules allow the call."""
        if user.superuser:
            return
        needs = requirements(service, method, request)
        if needs is None:
            raise AccessDeniedError(
                f"{method} is for super users only; user {user.access_key!r} is not one"
            )
        self.check_needs(user, needs, peer_ip, method)

    def check_needs(
        self, user: User, needs: Iterable[Need], peer_ip: str | None, what: str
    ) -> None:
        """AccessDeniedError unless ``user``'s rules allow every need (``what``: the call,
        for the message); the gRPC and the remoting ports share this decision."""
        if user.superuser:
            return
        rules = self.store.rules_of(user.access_key)
        source = source_network(peer_ip)
        for kind, name, actions in needs:
            if not decide(user, rules, kind, name, actions, source):
                wanted = " or ".join(a.value for a in actions)
                raise AccessDeniedError(
                    f"user {user.access_key!r} may not {wanted} on {kind}:{name} ({what})"
                )
