"""User and ACL admin calls of :class:`~broker_core.client.RocketMQClient` (super users
only when the broker's authentication is on); see ``broker_core/server/admin_auth.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker_core.client.admin import AdminCalls


class AuthAdminCalls(AdminCalls):
    """``rmq user …`` and ``rmq acl …`` over the admin service."""

    def create_user(
        self, user: str, secret_key: str, *, superuser: bool = False, update: bool = False
    ) -> dict[str, Any]:
        """Add a user (``update``: or replace it); ``{"user", "superuser", "created"}``."""
        result: dict[str, Any] = self._admin(
            "CreateUser",
            {"user": user, "secret_key": secret_key, "superuser": superuser, "update": update},
        )
        return result

    def delete_user(self, user: str) -> None:
        self._admin("DeleteUser", {"user": user})

    def list_users(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._admin("ListUsers", {})
        return result

    def create_acl(
        self,
        user: str,
        resource: str,
        actions: Sequence[str],
        *,
        decision: str = "Allow",
        source_ips: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Give ``user`` a rule on ``resource`` (``Topic:orders``, ``Group:g*``, …)."""
        result: dict[str, Any] = self._admin(
            "CreateAcl",
            {
                "user": user,
                "resource": resource,
                "actions": list(actions),
                "decision": decision,
                "source_ips": list(source_ips),
            },
        )
        return result

    def delete_acl(self, user: str, resource: str | None = None) -> int:
        """Remove ``user``'s rules for ``resource`` (all without); how many went."""
        payload = {"user": user} if resource is None else {"user": user, "resource": resource}
        return int(self._admin("DeleteAcl", payload)["deleted"])

    def list_acls(self, user: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._admin(
            "ListAcls", {} if user is None else {"user": user}
        )
        return result
