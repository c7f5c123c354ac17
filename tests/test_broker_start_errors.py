"""``rmq broker start`` failures name what failed: the address, the store, the port, the stop.

Every case runs the installed ``rmq`` console script (or ``python -m broker_core.server``)
as a real process and checks its exit status and its last line.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker_core.address import parse_host_port
from broker_core.errors import InvalidArgumentError

RMQ = Path(sys.executable).with_name("rmq")


def start(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``rmq broker start ARGS`` to completion (these all fail before READY)."""
    return subprocess.run(
        [str(RMQ), "broker", "start", *args], capture_output=True, text=True, timeout=timeout_s
    )


def last_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "READY" not in result.stdout
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error:"), result.stderr
    return line


@pytest.mark.parametrize("port", ["99999", "-5", "65536", "http", ""])
def test_listen_port_out_of_range_is_refused(tmp_path, port) -> None:
    line = last_error(start("--listen", f"127.0.0.1:{port}", "--store-dir", str(tmp_path)))
    assert "--listen" in line and "1..65535" in line and f"127.0.0.1:{port}" in line


def test_advertise_port_out_of_range_is_refused(tmp_path) -> None:
    line = last_error(
        start(
            "--listen",
            "127.0.0.1:0",
            "--advertise",
            "127.0.0.1:70000",
            "--store-dir",
            str(tmp_path),
        )
    )
    assert "--advertise" in line and "1..65535" in line


def test_store_dir_that_is_a_file_is_named(tmp_path) -> None:
    store = tmp_path / "store"
    store.write_text("not a directory")
    line = last_error(start("--listen", "127.0.0.1:0", "--store-dir", str(store)))
    assert f"{store} is a file, not a directory" in line and "listen" not in line


def test_store_dir_below_a_file_is_named(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    store = tmp_path / "file" / "store"
    line = last_error(start("--listen", "127.0.0.1:0", "--store-dir", str(store)))
    assert "cannot open the store" in line and "listen" not in line


def test_store_dir_that_cannot_be_written_is_named(tmp_path) -> None:
    """sysfs refuses new directories even to root: a store directory nobody may create."""
    store = Path("/sys/rmq-store-test")
    line = last_error(start("--listen", "127.0.0.1:0", "--store-dir", str(store)))
    assert f"cannot open the store at {store}" in line and "listen" not in line
    assert any(word in line for word in ("not permitted", "Permission denied", "Read-only"))


def test_busy_port_says_cannot_listen(tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = last_error(start("--listen", f"127.0.0.1:{port}", "--store-dir", str(tmp_path)))
    assert f"cannot listen on 127.0.0.1:{port}" in line


def test_module_entry_point_prints_one_line(tmp_path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker_core.server",
            "--listen",
            "127.0.0.1:99999",
            "--store-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: --listen must be HOST:PORT")


def test_error_while_stopping_is_named(tmp_path) -> None:
    """The clean-shutdown marker cannot be removed (it became a directory): the broker says
    stopping failed, not that it cannot listen, and exits non-zero."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [str(RMQ), "broker", "start", "--listen", "127.0.0.1:0", "--store-dir", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        assert any(line.startswith("READY ") for line in proc.stdout)
        abort = store / "abort"
        abort.unlink()
        abort.mkdir()
        (abort / "keep").write_text("x")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("Error: error while stopping the broker:") and "abort" in line, err


@pytest.mark.parametrize(
    ("text", "any_port", "expected"),
    [
        ("127.0.0.1:1", False, ("127.0.0.1", 1)),
        ("127.0.0.1:65535", False, ("127.0.0.1", 65535)),
        ("[::1]:0", True, ("[::1]", 0)),
    ],
)
def test_parse_host_port_accepts(text, any_port, expected) -> None:
    assert parse_host_port(text, allow_any_port=any_port) == expected


@pytest.mark.parametrize(
    "text", ["127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:-5", "h:٣", "127.0.0.1", ":8081", "h:+80"]
)
def test_parse_host_port_refuses(text) -> None:
    with pytest.raises(InvalidArgumentError, match=r"1\.\.65535"):
        parse_host_port(text, what="endpoint")


def test_config_value_of_the_wrong_type_names_key_and_type(tmp_path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("[store]\nsegment_size_bytes = '1g'\n")
    line = last_error(
        start(
            "--listen", "127.0.0.1:0", "--store-dir", str(tmp_path / "s"), "--config", str(config)
        )
    )
    assert "segment_size_bytes in [store] must be an integer, got '1g'" in line
    assert "not supported" not in line and "listen" not in line


def test_broker_config_defaults_prints_every_key(tmp_path) -> None:
    out = subprocess.run(
        [str(RMQ), "broker", "config", "--defaults"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "[broker]" in out and "[store]" in out
    assert 'flush_mode = "async"' in out and "# 'sync': a send is acknowledged" in out
