"""``rmq user create|list|delete`` and ``rmq acl create|list|delete``.

With authentication on, these need a super user's keys (``RMQ_ACCESS_KEY`` /
``RMQ_SECRET_KEY``)::

    RMQ_ACCESS_KEY=admin RMQ_SECRET_KEY=... rmq user create alice --secret-key S
    RMQ_ACCESS_KEY=admin RMQ_SECRET_KEY=... rmq acl create --user alice \\
        --resource Topic:orders --actions Pub --decision Allow
"""

from __future__ import annotations

import click

from broker_core.cli_base import _client, _table, cli, endpoints_option


@cli.group()
def user() -> None:
    """Create, list and delete users (access keys)."""


@user.command("create")
@click.argument("name")
@click.option("--secret-key", required=True, help="the user's secret key (6..256 chars)")
@click.option("--superuser", is_flag=True, help="allowed everything, manages users and ACLs")
@click.option("--update", is_flag=True, help="replace the user if it exists")
@endpoints_option
def user_create(name: str, secret_key: str, superuser: bool, update: bool, endpoints: str) -> None:
    """Create user NAME (its access key)."""
    with _client(endpoints) as client:
        done = client.create_user(name, secret_key, superuser=superuser, update=update)
    kind = "super user" if done["superuser"] else "user"
    click.echo(f"{kind} {name} {'created' if done['created'] else 'updated'}")


@user.command("list")
@endpoints_option
def user_list(endpoints: str) -> None:
    """List users (never their secret keys)."""
    with _client(endpoints) as client:
        users = client.list_users()
    _table(
        "users",
        ["user", "super user", "rules"],
        [(u["user"], u["superuser"], u["rules"]) for u in users],
    )


@user.command("delete")
@click.argument("name")
@endpoints_option
def user_delete(name: str, endpoints: str) -> None:
    """Delete user NAME and its rules."""
    with _client(endpoints) as client:
        client.delete_user(name)
    click.echo(f"user {name} deleted")


@cli.group()
def acl() -> None:
    """Create, list and delete ACL rules."""


@acl.command("create")
@click.option("--user", "name", required=True, help="the user the rule is for")
@click.option("--resource", required=True, help="Topic:NAME, Group:NAME, Topic:PREFIX*, Topic:*")
@click.option(
    "--actions", required=True, help="comma-separated: Pub,Sub,Create,Update,Delete,Get,List,All"
)
@click.option(
    "--decision",
    default="Allow",
    show_default=True,
    help="Deny wins over Allow",
    type=click.Choice(["Allow", "Deny"], case_sensitive=False),
)
@click.option("--source-ip", "source_ips", multiple=True, help="address or CIDR, repeatable")
@endpoints_option
def acl_create(
    name: str,
    resource: str,
    actions: str,
    decision: str,
    source_ips: tuple[str, ...],
    endpoints: str,
) -> None:
    """Give --user a rule on --resource."""
    with _client(endpoints) as client:
        rule = client.create_acl(
            name,
            resource,
            [a for a in actions.split(",") if a.strip()],
            decision=decision,
            source_ips=source_ips,
        )
    where = f" from {', '.join(rule['source_ips'])}" if rule["source_ips"] else ""
    click.echo(
        f"{rule['decision']} {','.join(rule['actions'])} on {rule['resource']} for {name}{where}"
    )


@acl.command("list")
@click.option("--user", "name", default=None, help="only this user's rules")
@endpoints_option
def acl_list(name: str | None, endpoints: str) -> None:
    """List ACL rules."""
    with _client(endpoints) as client:
        rules = client.list_acls(name)
    _table(
        "acls",
        ["user", "resource", "actions", "decision", "source IPs"],
        [
            (
                r["user"],
                r["resource"],
                ",".join(r["actions"]),
                r["decision"],
                ",".join(r["source_ips"]) or "any",
            )
            for r in rules
        ],
    )


@acl.command("delete")
@click.option("--user", "name", required=True, help="whose rules to delete")
@click.option("--resource", default=None, help="only the rules on this resource")
@endpoints_option
def acl_delete(name: str, resource: str | None, endpoints: str) -> None:
    """Delete --user's rules (on --resource, or all)."""
    with _client(endpoints) as client:
        removed = client.delete_acl(name, resource)
    click.echo(f"{removed} rule(s) of {name} deleted")
