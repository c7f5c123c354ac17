"""The admin service's method table is built once, with the user/ACL verbs, and nothing
can change it at run time (issue 26: it used to be extended by the auth installer)."""

from __future__ import annotations

import pytest

from broker_core.server import admin
from broker_core.server.handlers import admin_auth
from broker_core.server.json_args import Verb


def test_the_table_holds_every_family_including_users_and_acls() -> None:
    assert set(admin_auth.VERBS) <= set(admin.METHODS)
    assert {"Health", "CreateTopic", "CreateGroup", "LockQueues", "GetBrokerConfig"} <= set(
        admin.METHODS
    )
    assert {name for name, verb in admin.METHODS.items() if verb.change} == admin.CHANGES
    assert {"CreateUser", "DeleteAcl"} <= admin.CHANGES and "ListUsers" not in admin.CHANGES


def test_the_table_cannot_be_changed() -> None:
    verb: Verb = admin.METHODS["Health"]
    with pytest.raises(TypeError):
        admin.METHODS["Extra"] = verb  # type: ignore[index]
    with pytest.raises(AttributeError):
        admin.CHANGES.add("Extra")  # type: ignore[attr-defined]
