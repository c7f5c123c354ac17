"""``rmq`` against a real broker process: every verb, and its error paths.

Commands run in-process through ``click.testing.CliRunner``; ``rmq broker start`` runs
as the installed console script in a subprocess (READY line, SIGTERM, exit 0).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from broker_core.cli import cli
from tests.server.conftest import BrokerProcess, start_broker

RMQ = Path(sys.executable).with_name("rmq")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("cli"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def rmq(broker: BrokerProcess | None, *args: str) -> Result:
    """Run ``rmq ARGS --endpoints <broker>`` in-process with a wide terminal."""
    argv = list(args) + (["--endpoints", broker.endpoint] if broker else [])
    return CliRunner(env={"COLUMNS": "250"}).invoke(cli, argv, catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(result: Result, *words: str) -> str:
    """Exit status 1 and a one-line ``Error: ...`` naming ``words``; no traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error:"), result.stderr
    for word in words:
        assert word in line, line
    return line


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- topics and groups ----------------------------------------------------------------------


def test_topic_create_list_status_delete(broker) -> None:
    assert "topic cli_orders created: 3 read / 3 write queues" in ok(
        rmq(broker, "topic", "create", "cli_orders", "--queues", "3", "--type", "normal")
    )
    assert "unchanged: 3 read / 3 write queues" in ok(
        rmq(broker, "topic", "create", "cli_orders", "--queues", "3")
    )
    assert "updated: 3 read / 3 write queues, perm 4" in ok(
        rmq(broker, "topic", "create", "cli_orders", "--perm", "4", "--update")
    )
    assert "updated: 2 read / 3 write queues, perm 6" in ok(
        rmq(
            broker,
            "topic",
            "create",
            "cli_orders",
            "--read-queues",
            "2",
            "--perm",
            "6",
            "--update",
            "--force",
        )
    )
    listed = ok(rmq(broker, "topic", "list"))
    assert re.search(r"cli_orders\s*│\s*2\s*│\s*3\s*│\s*6\s*│\s*NORMAL", listed), listed
    status = ok(rmq(broker, "topic", "status", "cli_orders"))
    assert re.search(r"│\s*1\s*│\s*0\s*│\s*0\s*│\s*0\s*│", status), status
    assert "topic cli_orders deleted" in ok(rmq(broker, "topic", "delete", "cli_orders"))
    assert "cli_orders" not in ok(rmq(broker, "topic", "list"))


def test_system_topics_only_with_all(broker) -> None:
    from broker_core.cli_admin import TOOL_TOPIC_PREFIXES
    from connector.exactly_once import MARKER_TOPIC_PREFIX

    assert MARKER_TOPIC_PREFIX in TOOL_TOPIC_PREFIXES
    marker = f"{MARKER_TOPIC_PREFIX}cli-query"  # what the Spark sink creates
    ok(rmq(broker, "topic", "create", marker, "--queues", "1"))
    listed, everything = ok(rmq(broker, "topic", "list")), ok(rmq(broker, "topic", "list", "--all"))
    assert "SCHEDULE_TOPIC_XXXX" not in listed and marker not in listed
    assert "SCHEDULE_TOPIC_XXXX" in everything and marker in everything
    assert marker not in ok(rmq(broker, "topic", "list", "--json"))


def test_group_create_and_list(broker) -> None:
    out = ok(
        rmq(
            broker,
            "group",
            "create",
            "GID_cli_a",
            "--max-retries",
            "3",
            "--retry-backoff",
            "1s,5s",
            "--fifo",
        )
    )
    assert "group GID_cli_a created: max retries 3, backoff 1000ms,5000ms, fifo True" in out
    fails(
        rmq(broker, "group", "create", "GID_cli_a", "--max-retries", "4"),
        "exists with other settings",
        "--update",
    )
    out = ok(
        rmq(
            broker,
            "group",
            "create",
            "GID_cli_a",
            "--retry-backoff",
            "exponential:1s,2,1m",
            "--update",
        )
    )
    assert "updated: max retries 3, backoff 1000ms x2.0 up to 60000ms, fifo True" in out
    listed = ok(rmq(broker, "group", "list"))
    assert re.search(r"GID_cli_a\s*│\s*3\s*│", listed), listed


# ---- send, consume, progress, query, reset ----------------------------------------------------


@pytest.fixture(scope="module")
def sent(broker: BrokerProcess) -> list[dict[str, str]]:
    """Six messages sent with ``rmq send`` to a 2-queue topic: what each printed."""
    ok(rmq(broker, "topic", "create", "cli_events", "--queues", "2"))
    receipts = []
    for i in range(6):
        tag = "TagA" if i % 2 == 0 else "TagB"
        out = ok(
            rmq(
                broker,
                "send",
                "cli_events",
                f"event {i}",
                "--tag",
                tag,
                "--keys",
                f"ev-{i},batch-1",
                "--property",
                f"seq={i}",
                "--property",
                "origin=cli",
            )
        )
        receipts.append(dict(line.split(": ", 1) for line in out.strip().splitlines()))
    return receipts


def test_message_get_reads_one_message_by_queue_and_offset(broker, sent) -> None:
    receipt = sent[3]
    where = ("--topic", "cli_events", "--queue", receipt["queue"], "--offset", receipt["offset"])
    found = json.loads(ok(rmq(broker, "message", "get", *where, "--json")))
    assert found["body"] == "event 3" and found["message_id"] == receipt["message id"]
    assert found["properties"]["seq"] == "3" and found["keys"] == ["ev-3", "batch-1"]
    assert "event 3" in ok(rmq(broker, "message", "get", *where))
    beyond = ("--topic", "cli_events", "--queue", "0", "--offset", "999")
    fails(rmq(broker, "message", "get", *beyond), "999")


def test_broker_status(broker, sent) -> None:
    status = json.loads(ok(rmq(broker, "broker", "status", "--json")))
    assert status["commitlog_max_offset"] > 0 and status["services"]
    assert all(state == "ok" for state in status["services"].values()), status
    table = ok(rmq(broker, "broker", "status"))
    assert "commitlog max offset" in table and "service " in table


def test_send_prints_id_queue_and_offset(sent) -> None:
    for receipt in sent:
        assert re.fullmatch(r"[0-9A-F]{34}", receipt["message id"])
        assert receipt["queue"] in ("0", "1")
        assert int(receipt["offset"]) >= 0
    assert sorted((r["queue"], r["offset"]) for r in sent) == sorted(
        {(r["queue"], r["offset"]) for r in sent}
    )  # every (queue, offset) once


def test_consume_from_earliest_then_caught_up(broker, sent) -> None:
    result = rmq(broker, "consume", "cli_events", "--group", "GID_cli_c", "--from", "earliest")
    lines = [line for line in ok(result).splitlines() if line.startswith("[")]
    assert sorted(line.rsplit(" ", 2)[-2:][1] for line in lines) == [str(i) for i in range(6)]
    assert all(r["message id"] in result.stdout for r in sent)
    assert "consumed 6 message(s)" in result.stderr
    again = rmq(broker, "consume", "cli_events", "--group", "GID_cli_c")
    assert "consumed 0 message(s)" in again.stderr  # the committed offsets held
    progress = ok(rmq(broker, "group", "progress", "GID_cli_c"))
    assert "total lag 0" in progress
    assert re.search(r"cli_events\s*│\s*0\s*│\s*3\s*│\s*3\s*│\s*0", progress), progress


def test_consume_with_max_and_tag_filter(broker, sent) -> None:
    result = rmq(
        broker,
        "consume",
        "cli_events",
        "--group",
        "GID_cli_t",
        "--from",
        "earliest",
        "--tag",
        "TagB",
        "--max",
        "2",
    )
    lines = [line for line in ok(result).splitlines() if line.startswith("[")]
    assert len(lines) == 2 and all("tag=TagB" in line for line in lines)
    assert "keys=ev-" in lines[0]


def test_group_progress_shows_lag(broker, sent) -> None:
    ok(rmq(broker, "consume", "cli_events", "--group", "GID_cli_p", "--from", "latest"))
    ok(
        rmq(
            broker,
            "offset",
            "reset",
            "--group",
            "GID_cli_p",
            "--topic",
            "cli_events",
            "--to",
            "earliest",
        )
    )
    progress = ok(rmq(broker, "group", "progress", "GID_cli_p", "--topic", "cli_events"))
    assert "total lag 6" in progress


def test_message_query_by_id_and_key(broker, sent) -> None:
    out = ok(rmq(broker, "message", "query", "--id", sent[2]["message id"]))
    assert "event 2 (7 bytes)" in out and "TagA" in out and "origin=cli" in out
    assert re.search(rf"offset\s*│\s*{sent[2]['offset']}\s", out), out
    out = ok(rmq(broker, "message", "query", "--key", "batch-1", "--topic", "cli_events"))
    assert out.count("event ") == 6
    assert "no message" in ok(
        rmq(broker, "message", "query", "--key", "nope", "--topic", "cli_events")
    )


def test_offset_reset_of_unknown_group_fails_and_creates_nothing(broker, sent) -> None:
    fails(
        rmq(
            broker,
            "offset",
            "reset",
            "--group",
            "GID_nosuch",
            "--topic",
            "cli_events",
            "--to",
            "earliest",
        ),
        "GID_nosuch",
        "does not exist",
    )
    assert "GID_nosuch" not in ok(rmq(broker, "group", "list"))


def test_offset_reset_to_latest_ms_and_iso(broker, sent) -> None:
    ok(rmq(broker, "group", "create", "GID_cli_r"))
    out = ok(
        rmq(
            broker,
            "offset",
            "reset",
            "--group",
            "GID_cli_r",
            "--topic",
            "cli_events",
            "--to",
            "latest",
        )
    )
    assert re.search(r"│\s*0\s*│\s*3\s*│", out) and re.search(r"│\s*1\s*│\s*3\s*│", out), out
    out = ok(
        rmq(broker, "offset", "reset", "--group", "GID_cli_r", "--topic", "cli_events", "--to", "0")
    )
    assert re.search(r"│\s*1\s*│\s*0\s*│", out), out
    out = ok(
        rmq(
            broker,
            "offset",
            "reset",
            "--group",
            "GID_cli_r",
            "--topic",
            "cli_events",
            "--to",
            "2999-01-01T00:00:00Z",
        )
    )
    assert re.search(r"│\s*0\s*│\s*3\s*│", out), out


def test_send_with_delay_and_message_group(broker) -> None:
    out = ok(rmq(broker, "send", "cli_timed", "later", "--delay", "1h"))
    assert "deliver at:" in out and "recall handle:" in out
    first = ok(rmq(broker, "send", "cli_fifo", "one", "--group", "g1"))
    second = ok(rmq(broker, "send", "cli_fifo", "two", "--group", "g1"))
    queue = [line for line in first.splitlines() if line.startswith("queue:")]
    assert queue == [line for line in second.splitlines() if line.startswith("queue:")]


# ---- errors ---------------------------------------------------------------------------------


def test_unreachable_broker_is_one_line(tmp_path) -> None:
    endpoint = f"127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(cli, ["topic", "list", "--endpoints", endpoint])
    fails(result, "unreachable", endpoint)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["topic", "status", "no_such_topic"], ["no_such_topic", "does not exist"]),
        (["group", "progress", "GID_no_such"], ["GID_no_such", "does not exist"]),
        (["topic", "create", "bad topic!"], ["bad topic!"]),
        (["group", "create", "GID_x", "--retry-backoff", "soon"], ["bad duration 'soon'"]),
        (["group", "create", "GID_x", "--retry-backoff", "exponential:1s"], ["exponential:"]),
        (
            ["offset", "reset", "--group", "G", "--topic", "cli_events", "--to", "yesterday"],
            ["yesterday"],
        ),
        (
            ["offset", "reset", "--group", "G", "--topic", "no_such_topic", "--to", "earliest"],
            ["no_such_topic"],
        ),
        (["message", "query", "--id", "0123456789ABCDEF0123456789ABCDEF01"], ["no message"]),
        (["message", "query", "--key", "k"], ["--key needs --topic"]),
        (["message", "query"], ["exactly one of --id and --key"]),
        (["send", "cli_events", "x", "--property", "novalue"], ["KEY=VALUE"]),
        (["send", "cli_events", "x", "--delay", "soon"], ["bad duration"]),
        (["consume", "cli_events"], ["--group"]),
        (["consume", "no_such_topic", "--group", "G"], ["no_such_topic"]),
        (["topic", "create", "t", "--queues", "0"], ["--queues"]),
        # the broker's own topics: refused, never acknowledged and then dropped
        (["send", "SCHEDULE_TOPIC_XXXX", "x"], ["SCHEDULE_TOPIC_XXXX", "system topic"]),
        (["send", "RMQ_SYS_TRANS_HALF_TOPIC", "x"], ["RMQ_SYS_TRANS_HALF_TOPIC", "system topic"]),
        (["send", "rmq_sys_wheel_timer", "x", "--delay", "1h"], ["system topic"]),
    ],
)
def test_expected_errors_exit_1_with_one_line(broker, args, words) -> None:
    fails(rmq(broker, *args), *words)


def test_bad_endpoint_is_a_clear_error() -> None:
    fails(CliRunner().invoke(cli, ["topic", "list", "--endpoints", "nowhere"]), "HOST:PORT")


# ---- rmq broker start -----------------------------------------------------------------------


def test_broker_start_prints_ready_and_stops_on_sigterm(tmp_path) -> None:
    proc = subprocess.Popen(
        [
            str(RMQ),
            "broker",
            "start",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            str(tmp_path / "store"),
            "--flush",
            "sync",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        ready = ""
        for line in proc.stdout:
            if line.startswith("READY "):
                ready = line.split()[1]
                break
        assert ready, "rmq broker start exited before READY"
        result = CliRunner().invoke(cli, ["topic", "create", "started", "--endpoints", ready])
        assert result.exit_code == 0, result.output
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert not (tmp_path / "store" / "abort").exists()
