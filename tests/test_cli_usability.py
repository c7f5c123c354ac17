"""``rmq`` usability against a real broker: --version, --json on read verbs, bodies from a
file or stdin, an honest consume summary, help on every option (issue 13, item 20)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from broker_core.cli import cli
from tests.server.conftest import BrokerProcess, start_broker
from tests.test_cli import fails, ok, rmq

RMQ = Path(sys.executable).with_name("rmq")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("cli-usability"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def topic(broker: BrokerProcess) -> str:
    ok(rmq(broker, "topic", "create", "us_events", "--queues", "2"))
    ok(rmq(broker, "group", "create", "GID_us"))
    for i in range(4):
        ok(rmq(broker, "send", "us_events", f"event {i}", "--tag", "T", "--keys", f"k{i}"))
    return "us_events"


def test_version() -> None:
    out = subprocess.run(
        [str(RMQ), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert out.startswith("rmq ") and out.split()[1][0].isdigit()


def test_json_on_every_read_verb(broker, topic) -> None:
    topics = json.loads(ok(rmq(broker, "topic", "list", "--json")))
    assert {"name": topic, "read_queue_nums": 2}.items() <= next(
        t for t in topics if t["name"] == topic
    ).items()
    status = json.loads(ok(rmq(broker, "topic", "status", topic, "--json")))
    assert sum(r["max_offset"] for r in status) == 4
    groups = json.loads(ok(rmq(broker, "group", "list", "--json")))
    assert "GID_us" in [g["name"] for g in groups]
    reset = json.loads(
        ok(
            rmq(
                broker,
                "offset",
                "reset",
                "--group",
                "GID_us",
                "--topic",
                topic,
                "--to",
                "earliest",
                "--json",
            )
        )
    )
    assert reset == [{"queue_id": 0, "offset": 0}, {"queue_id": 1, "offset": 0}]
    progress = json.loads(ok(rmq(broker, "group", "progress", "GID_us", "--json")))
    assert progress["total_lag"] == 4
    found = json.loads(
        ok(rmq(broker, "message", "query", "--key", "k2", "--topic", topic, "--json"))
    )
    assert [m["body"] for m in found] == ["event 2"]
    result = rmq(broker, "consume", topic, "--group", "GID_us", "--json")
    consumed = [json.loads(line) for line in ok(result).splitlines()]
    assert sorted(m["body"] for m in consumed) == [f"event {i}" for i in range(4)]
    assert all(m["tag"] == "T" and m["topic"] == topic for m in consumed)


def test_tables_stay_the_default(broker, topic) -> None:
    assert "│" in ok(rmq(broker, "topic", "list"))


def test_body_from_stdin_larger_than_the_argument_limit(broker) -> None:
    """300 KiB of binary from stdin: beyond a single argument's limit (128 KiB on Linux)."""
    body = bytes(range(256)) * 1200
    ok(rmq(broker, "topic", "create", "us_big", "--queues", "1"))
    argv = [str(RMQ), "send", "us_big", "--body-file", "-", "--endpoints", broker.endpoint]
    done = subprocess.run(argv, input=body, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = ok(
        rmq(broker, "consume", "us_big", "--group", "GID_us_big", "--from", "earliest", "--json")
    )
    [message] = [json.loads(line) for line in out.splitlines()]
    assert message["body_encoding"] == "base64" and base64.b64decode(message["body"]) == body


def test_body_from_a_file(broker, tmp_path) -> None:
    path = tmp_path / "body.txt"
    path.write_text("from a file")
    ok(rmq(broker, "send", "us_file", "--body-file", str(path)))
    out = ok(rmq(broker, "consume", "us_file", "--group", "GID_us_file", "--from", "earliest"))
    assert "from a file" in out


@pytest.mark.parametrize(
    "args", [["send", "us_events"], ["send", "us_events", "x", "--body-file", "-"]]
)
def test_send_needs_exactly_one_body(broker, args) -> None:
    fails(rmq(broker, *args), "exactly one of BODY and --body-file")


def test_consume_that_consumed_nothing_does_not_claim_a_commit(broker, topic) -> None:
    ok(rmq(broker, "group", "create", "GID_us_none"))
    result = rmq(broker, "consume", topic, "--group", "GID_us_none", "--from", "latest")
    assert "consumed 0 message(s); no offsets to commit" in result.stderr
    assert "committed" not in result.stderr
    progress = json.loads(ok(rmq(broker, "group", "progress", "GID_us_none", "--json")))
    assert progress["queues"] == []  # nothing was committed


def _commands(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, f"{path} {name}")
    else:
        yield path, command


def test_every_option_has_help() -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command in _commands(cli, "rmq")
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert missing == []


def test_broker_start_help_explains_store_dir_and_flush_default() -> None:
    out = " ".join(CliRunner().invoke(cli, ["broker", "start", "--help"]).output.split())
    assert "--store-dir" in out and "commitlog" in out
    assert "--flush" in out and "default: the config's flush_mode, async" in out
