"""``rmq console``: the web console (``broker_core/console/``) in the foreground."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import click

from broker_core import cli_cluster
from broker_core.cli_base import cli, endpoints_option


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@cli.command("console")
@click.option("--listen", default="127.0.0.1:8088", show_default=True, help="HOST:PORT to serve on")
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def console(listen: str, endpoints: str, namesrv: str | None) -> None:
    """Serve the web console of the broker at --endpoints, or of the cluster behind
    --namesrv. With authentication on, it asks each user for an access key and secret
    key and makes every call as that user."""
    try:
        from broker_core.console.server import ConsoleServer  # its web deps load only here
    except ImportError as exc:
        raise click.ClickException(
            f"the web console needs the 'console' extra "
            f"(pip install 'rocketmq-spark[console]'): {exc}"
        ) from None

    server = ConsoleServer(listen, endpoints=None if namesrv else endpoints, namesrv=namesrv)
    if not _is_loopback(server.host):
        click.echo(
            f"Warning: the console listens on {server.host}, beyond this machine; "
            "without authentication on the brokers anyone who reaches it can change them",
            err=True,
        )
    click.echo(f"console: {server.url}", err=False)
    server.run()


def console_for_cluster(
    namesrv: str, listen: str = "127.0.0.1:0"
) -> tuple[str, Callable[[], None]] | None:
    """Start a console of the cluster behind ``namesrv`` on a background thread, for ``rmq
    cluster up``: ``(url, stop)``, or None when the ``console`` extra is not installed.

    A busy ``listen`` address raises ListenError (port 0, the default, picks a free one).
    """
    try:
        from broker_core.console.server import start_console
    except ImportError:  # pip install 'rocketmq-spark[console]'
        return None
    server = start_console(listen, namesrv=namesrv)
    return server.url, server.stop
