"""What every ``rmq`` verb module shares: the root group ``cli`` (our errors become one
``Error: ...`` line and exit status 1), ``--endpoints``/``--json`` options, the client the
verbs use and table/JSON printing."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from broker_core.client import RocketMQClient
from broker_core.client.env import client_settings
from broker_core.errors import RocketMQError

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_ENDPOINTS = "127.0.0.1:8081"
# A send is retried as the official clients do (3 attempts); the waits (1 s, then 2 s)
# outlast a failover within the election bound. The message keeps its id across attempts
# (the request is encoded once), so a retry after a lost answer is stored once (the
# broker's dedup, broker/dedup.py).
SEND_ATTEMPTS = 3
SEND_RETRY_BACKOFF_S = 1.0


class _Rmq(click.Group):
    """Turns our errors into one-line messages and every usage error into exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocketMQError as exc:
            raise click.ClickException(" ".join(str(exc).split())) from None
        except click.UsageError as exc:
            exc.exit_code = 1  # type: ignore[misc]  # "bad arguments" exit 1, as all errors
            raise


def endpoints_option(command: F) -> F:
    return click.option(
        "--endpoints",
        envvar="RMQ_ENDPOINTS",
        default=DEFAULT_ENDPOINTS,
        show_default=True,
        help="broker HOST:PORT",
    )(command)


def broker_client(
    endpoints: str,
    *,
    timeout_s: float = 10.0,
    max_attempts: int = 2,
    retry_backoff_s: float = 0.1,
) -> RocketMQClient:
    """The client every verb uses for a broker (given by ``--endpoints`` or found through
    ``--namesrv``): signing with $RMQ_ACCESS_KEY/$RMQ_SECRET_KEY and using TLS per
    $RMQ_TLS/$RMQ_CA_FILE (``broker_core/client/env.py``)."""
    return RocketMQClient(
        endpoints,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        retry_backoff_s=retry_backoff_s,
        **client_settings(),
    )


def _client(endpoints: str) -> RocketMQClient:
    return broker_client(endpoints)


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console(highlight=False, soft_wrap=True).print(table)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")(
        command
    )


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


@click.group(cls=_Rmq)
@click.version_option(
    package_name="rocketmq-spark", prog_name="rmq", message="%(prog)s %(version)s"
)
def cli() -> None:
    """Run and administer a RocketMQ-style broker."""
