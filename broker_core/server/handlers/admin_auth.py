"""Admin verbs for users and ACLs (super users only when auth is on; see
``auth/resources.py``); ``server/admin.py`` serves them.

==========  =================================================================================
CreateUser  user, secret_key, superuser?, update? → {"user", "superuser", "created"}
DeleteUser  user → {"deleted": user} (its rules go too)
ListUsers   (none) → [{"user", "superuser", "rules"}] (never secret keys)
CreateAcl   user, resource, actions (list or "Pub,Sub"), decision? ("Allow"), source_ips?
            → the rule (replaces the user's rule for the same resource and decision)
DeleteAcl   user, resource? → {"deleted": count} (all the user's rules without resource)
ListAcls    user? → [{"user", "resource", "actions", "decision", "source_ips"}]
==========  =================================================================================

A slave refuses the four changes (NotMasterError): its table is copied from its master.
"""

from __future__ import annotations

from typing import Final

from broker_core.auth.acl import Rule
from broker_core.auth.store import AuthStore
from broker_core.errors import InvalidArgumentError, UnsupportedError
from broker_core.server.context import ServerContext
from broker_core.server.json_args import Args, Json, Verb


def _store(ctx: ServerContext) -> AuthStore:
    if ctx.auth is None:
        raise UnsupportedError("this broker keeps no user table")
    return ctx.auth


def _master_store(ctx: ServerContext) -> AuthStore:
    """The table to change: NotMasterError on a slave, whose table is its master's copy
    (a change there would be overwritten at the next copy, ``ha/metadata.py``)."""
    ctx.broker.require_master()
    return _store(ctx)


def create_user(ctx: ServerContext, args: Args) -> Json:
    user, created = _master_store(ctx).create_user(
        args.text("user", required=True),
        args.text("secret_key", required=True),
        superuser=bool(args.flag("superuser")),
        update=bool(args.flag("update")),
    )
    return {"user": user.access_key, "superuser": user.superuser, "created": created}


def delete_user(ctx: ServerContext, args: Args) -> Json:
    name = args.text("user", required=True)
    _master_store(ctx).delete_user(name)
    return {"deleted": name}


def list_users(ctx: ServerContext, args: Args) -> list[Json]:
    store = _store(ctx)
    return [
        {"user": u.access_key, "superuser": u.superuser, "rules": len(store.rules_of(u.access_key))}
        for u in store.users()
    ]


def _actions(raw: object) -> list[str]:
    if isinstance(raw, str):
        return [a for a in raw.split(",") if a.strip()]
    if isinstance(raw, list) and all(isinstance(a, str) for a in raw):
        return raw
    raise InvalidArgumentError(f"CreateAcl: 'actions' must be a list or 'Pub,Sub', got {raw!r}")


def create_acl(ctx: ServerContext, args: Args) -> Json:
    name = args.text("user", required=True)
    ips = args.data.get("source_ips") or []
    if isinstance(ips, str):
        ips = [s for s in ips.split(",") if s.strip()]
    if not isinstance(ips, list) or not all(isinstance(s, str) for s in ips):
        raise InvalidArgumentError("CreateAcl: 'source_ips' must be a list of addresses/CIDRs")
    rule = Rule.build(
        args.text("resource", required=True),
        _actions(args.data.get("actions")),
        args.text("decision") or "Allow",
        ips,
    )
    _master_store(ctx).create_acl(name, rule)
    return {"user": name, **rule.to_dict()}


def delete_acl(ctx: ServerContext, args: Args) -> Json:
    removed = _master_store(ctx).delete_acl(args.text("user", required=True), args.text("resource"))
    return {"deleted": removed}


def list_acls(ctx: ServerContext, args: Args) -> list[Json]:
    return [
        {"user": name, **rule.to_dict()}
        for name, rules in _store(ctx).acls(args.text("user")).items()
        for rule in rules
    ]


VERBS: Final = {
    "CreateUser": Verb(
        create_user, frozenset({"user", "secret_key", "superuser", "update"}), change=True
    ),
    "DeleteUser": Verb(delete_user, frozenset({"user"}), change=True),
    "ListUsers": Verb(list_users, frozenset()),
    "CreateAcl": Verb(
        create_acl,
        frozenset({"user", "resource", "actions", "decision", "source_ips"}),
        change=True,
    ),
    "DeleteAcl": Verb(delete_acl, frozenset({"user", "resource"}), change=True),
    "ListAcls": Verb(list_acls, frozenset({"user"})),
}
