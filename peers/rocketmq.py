"""Apache RocketMQ 5.x on loopback: a NameServer and a broker inside the gRPC proxy.

``start_rocketmq(directory)`` fetches the jars on first use (``./dev peers``), starts

* ``NamesrvStartup`` on a free port, and
* ``ProxyStartup -pm local`` — one JVM holding the broker (remoting, for 4.x clients and
  mqadmin) and the proxy (gRPC, for 5.x clients) — with the broker settings of
  :data:`BROKER_SETTINGS` (small files, async flush, SQL92 filters, trace topic),

waits until the broker is registered and the gRPC port answers, and returns a
:class:`RocketMQ` whose ``stop()`` ends both (SIGTERM, then SIGKILL after a grace time).
Every file either JVM writes (stores, logs under ``logs/rocketmqlogs``, the configs) lives
in ``directory``: ``user.home`` and ``ROCKETMQ_HOME`` point there. Nothing is left
running when ``stop()`` returns. Versions and settings that differ from RocketMQ's
defaults are written down in ``peers/README.md``.

Example (as the conformance suite does)::

    peer = start_rocketmq(tmp_dir)
    try:
        run_java(peer.namesrv, ...)
    finally:
        peer.stop()
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".peers" / "rocketmq"
SERVER_CLASSPATH = str(CACHE / "server" / "*")
CLIENT5_CLASSPATH = str(CACHE / "client5" / "*")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
CLUSTER = "PeerCluster"
BROKER_NAME = "peer-broker-a"

# Settings that differ from the broker's defaults (peers/README.md says why).
BROKER_SETTINGS: dict[str, str] = {
    "brokerClusterName": CLUSTER,
    "brokerName": BROKER_NAME,
    "brokerId": "0",
    "brokerIP1": "127.0.0.1",
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(30_000 * 20),
    "mappedFileSizeTimerLog": str(8 * 1024 * 1024),
    "enablePropertyFilter": "true",
    "traceTopicEnable": "true",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "diskMaxUsedSpaceRatio": "95",
    "deleteWhen": "04",
    "bindAddress": "127.0.0.1",
}
JVM_OPTIONS = ["-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC"]
NAMESRV_JVM_OPTIONS = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC"]


class PeerError(RuntimeError):
    """A peer did not start (its log's tail is in the message) or is not fetched."""


def ensure_fetched() -> None:
    """Run ``./dev peers`` when the jars are missing (a fresh clone's first use)."""
    if (CACHE / ".fetched").exists():
        return
    done = subprocess.run(
        [str(ROOT / "dev"), "peers"], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        raise PeerError(f"./dev peers failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_port() -> int:
    """A free port p with p-2 (the broker's "fast" remoting port) and p+1 (HA) free too."""
    for _ in range(200):
        port = free_port()
        if port > 1026 and _is_free(port - 2) and _is_free(port + 1):
            return port
    raise PeerError("no free port triple for the broker")


def accepting(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@dataclass
class JavaProcess:
    """A JVM child whose output is drained into ``output`` (never blocks on a full pipe)."""

    name: str
    proc: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def wait_line(self, needle: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(needle in line for line in list(self.output)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise PeerError(f"{self.name} never printed {needle!r}:\n{self.tail()}")
            time.sleep(0.05)

    def tail(self, lines: int = 40) -> str:
        return "".join(self.output[-lines:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(STOP_TIMEOUT_S)


def java(
    name: str, main: str, args: list[str], home: Path, jvm: list[str], classpath: str
) -> JavaProcess:
    """Start ``java ... main args`` with ``user.home`` and ``ROCKETMQ_HOME`` = ``home``."""
    cmd = ["java", *jvm, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}"]
    cmd += ["-cp", classpath, main, *args]
    env = {**os.environ, "ROCKETMQ_HOME": str(home)}
    proc = subprocess.Popen(
        cmd, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return JavaProcess(name, proc)


@dataclass
class RocketMQ:
    """A running peer: ``namesrv`` (host:port), ``remoting`` (the broker, 4.x clients),
    ``grpc`` (the proxy, 5.x clients), ``home`` (its files)."""

    home: Path
    namesrv: str
    remoting: str
    grpc: str
    processes: list[JavaProcess]

    def stop(self) -> None:
        """Stop the proxy+broker, then the NameServer; idempotent."""
        for process in reversed(self.processes):
            process.stop()

    def log(self, name: str) -> str:
        path = self.home / "logs" / "rocketmqlogs" / name
        return path.read_text(errors="replace") if path.exists() else ""


def _write_configs(home: Path, namesrv: str, port: int, grpc_port: int) -> tuple[Path, Path]:
    home.mkdir(parents=True, exist_ok=True)
    settings = {
        **BROKER_SETTINGS,
        "namesrvAddr": namesrv,
        "listenPort": str(port),
        "haListenPort": str(port + 1),
        "storePathRootDir": str(home / "store"),
        "storePathCommitLog": str(home / "store" / "commitlog"),
    }
    broker_conf = home / "broker.conf"
    broker_conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    proxy_conf = home / "rmq-proxy.json"
    proxy = {
        "rocketMQClusterName": CLUSTER,
        "namesrvAddr": namesrv,
        "grpcServerPort": grpc_port,
        "remotingListenPort": free_port(),
        "enableACL": False,
    }
    proxy_conf.write_text(json.dumps(proxy))
    return broker_conf, proxy_conf


def start_namesrv(home: Path) -> tuple[JavaProcess, str]:
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = home / "namesrv.conf"
    conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\n")
    main = "org.apache.rocketmq.namesrv.NamesrvStartup"
    process = java("namesrv", main, ["-c", str(conf)], home, NAMESRV_JVM_OPTIONS, SERVER_CLASSPATH)
    try:
        process.wait_line("boot success", START_TIMEOUT_S)
    except PeerError:
        process.stop()
        raise
    return process, f"127.0.0.1:{port}"


def start_broker_proxy(home: Path, namesrv: str) -> tuple[JavaProcess, int, int]:
    """The broker inside the proxy (``-pm local``); returns once both ports answer."""
    port, grpc_port = broker_port(), free_port()
    broker_conf, proxy_conf = _write_configs(home, namesrv, port, grpc_port)
    main = "org.apache.rocketmq.proxy.ProxyStartup"
    args = ["-pm", "local", "-bc", str(broker_conf), "-pc", str(proxy_conf), "-n", namesrv]
    process = java("proxy", main, args, home, JVM_OPTIONS, SERVER_CLASSPATH)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (accepting(port) and accepting(grpc_port)):
        if process.proc.poll() is not None or time.monotonic() > deadline:
            process.stop()
            raise PeerError(f"RocketMQ proxy/broker did not start:\n{process.tail()}")
        time.sleep(0.1)
    return process, port, grpc_port


def start_rocketmq(directory: Path) -> RocketMQ:
    """Start a NameServer and a broker+proxy under ``directory``; see the module doc."""
    ensure_fetched()
    home = directory.resolve()
    namesrv_proc, namesrv = start_namesrv(home / "namesrv")
    try:
        proxy_proc, port, grpc_port = start_broker_proxy(home / "broker", namesrv)
    except BaseException:
        namesrv_proc.stop()
        raise
    peer = RocketMQ(
        home, namesrv, f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", [namesrv_proc, proxy_proc]
    )
    try:
        _wait_registered(peer)
    except BaseException:
        peer.stop()
        raise
    return peer


def _wait_registered(peer: RocketMQ) -> None:
    """Until the NameServer lists the broker (routes and mqadmin need that)."""
    from broker_core.namesrv.client import NameServerClient

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        client = NameServerClient(peer.namesrv)
        try:
            info = client.get_cluster_info()
            if BROKER_NAME in info.brokers:
                return
        except Exception:  # still starting; the deadline decides
            pass
        finally:
            client.close()
        if time.monotonic() > deadline:
            raise PeerError(f"the broker never registered:\n{peer.processes[-1].tail()}")
        time.sleep(0.2)


def versions() -> dict[str, str]:
    """The fetched versions, read from the jars' names (what a run really used)."""
    names = [p.name for p in (CACHE / "server").glob("rocketmq-broker-*.jar")]
    names5 = [p.name for p in (CACHE / "client5").glob("rocketmq-client-java-*.jar")]
    broker = names[0].removeprefix("rocketmq-broker-").removesuffix(".jar") if names else "?"
    client5 = (
        names5[0].removeprefix("rocketmq-client-java-").removesuffix(".jar") if names5 else "?"
    )
    return {"rocketmq": broker, "rocketmq-client-java": client5}
