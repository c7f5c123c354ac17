"""``rmq``: run a broker and administer it — mqadmin's everyday verbs.

``rmq broker start|config [get|set]``, ``rmq namesrv start``, ``rmq topic
create|list|status|delete``, ``rmq group create|list|progress|clients|delete``, ``rmq
send``, ``rmq consume``, ``rmq message query``, ``rmq offset reset``; ``rmq --version``.
Verbs that print a table take ``--json`` for JSON instead.
Example::

    rmq topic create orders --queues 4 --endpoints 127.0.0.1:8081
    rmq send orders 'hello' --tag TagA --keys k1,k2 --property region=eu --delay 10s
    rmq consume orders --group GID_cli --from earliest --max 10 --tag 'TagA||TagB'

Every command that talks to a broker takes ``--endpoints HOST:PORT`` (default
``127.0.0.1:8081``, or ``$RMQ_ENDPOINTS``). Expected failures (broker unreachable, unknown
topic, bad arguments) print one line ``Error: ...`` and exit with status 1; no traceback.

The verbs live in one module per group: ``cli_server`` (broker, namesrv), ``cli_admin``
(topic, group), ``cli_messages`` (send, consume, message, offset), ``cli_cluster``,
``cli_auth`` (user, acl); ``cli_base`` holds the root group and the shared options.
"""

from __future__ import annotations

from collections.abc import Sequence

# The verb modules register their groups and commands on ``cli`` when imported.
from broker_core import (  # noqa: F401
    cli_auth,
    cli_broker_config,
    cli_cluster,
    cli_console,
    cli_messages,
    cli_server,
    cli_trace,
)
from broker_core.cli_admin import topic
from broker_core.cli_base import _iso, _table, cli

cli_cluster.install(cli, topic, _table, _iso)


def main(argv: Sequence[str] | None = None) -> None:
    """The ``rmq`` console script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="rmq")
