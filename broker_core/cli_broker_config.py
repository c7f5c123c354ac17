"""``rmq broker config get|set``: a running broker's settings, and changing the live ones
(mqadmin getBrokerConfig / updateBrokerConfig; the keys: ``broker/live_config.py``)."""

from __future__ import annotations

import click

from broker_core import cli_cluster
from broker_core.cli_base import _print_json, _table, broker_client, endpoints_option, json_option
from broker_core.cli_server import broker_config


def _targets(endpoints: str, namesrv: str | None) -> dict[str, str]:
    """Broker group -> address: every master of the cluster with --namesrv, else the one."""
    return cli_cluster.broker_addrs(namesrv) if namesrv else {endpoints: endpoints}


@broker_config.command("get")
@json_option
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def config_get(as_json: bool, endpoints: str, namesrv: str | None) -> None:
    """Every setting of the running broker (with --namesrv: of each broker group's
    master); ``*`` marks the keys 'set' can change."""
    answers = {}
    for name, addr in _targets(endpoints, namesrv).items():
        with broker_client(addr) as client:
            answers[name] = client.broker_config()
    if as_json:
        return _print_json(answers if namesrv else answers[endpoints])
    for name, answer in answers.items():
        live = set(answer["live_keys"])
        rows = [(k + (" *" if k in live else ""), v) for k, v in sorted(answer["config"].items())]
        _table(f"broker {name} (* = can change live)", ["key", "value"], rows)


@broker_config.command("set")
@click.argument("key")
@click.argument("value")
@json_option
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def config_set(key: str, value: str, as_json: bool, endpoints: str, namesrv: str | None) -> None:
    """Change KEY to VALUE on the running broker (with --namesrv: on every broker group's
    master); only keys that can change live, and not kept across a restart."""
    answers = {}
    for name, addr in _targets(endpoints, namesrv).items():
        with broker_client(addr) as client:
            answers[name] = client.update_broker_config(key, value)
    if as_json:
        return _print_json(answers if namesrv else answers[endpoints])
    for name, a in answers.items():
        click.echo(f"{name}: {a['key']} {a['old']} -> {a['new']}")
