"""Apache Kafka beside us: one KRaft node on loopback, and Spark's Kafka connector jars.

The jars come from Maven Central through ``peers/kafka/pom.xml`` into the ignored cache
``.peers/kafka/`` (``server/`` for Kafka, ``spark/`` for the connector); :func:`fetch` runs
Maven when the cache is missing or was fetched for another descriptor (the POM's SHA-256
is kept in ``.peers/kafka/.fetched``), so a test or bench that needs
Kafka fetches it on first use (``ensure_kafka_peer`` in ``dev`` does the same up front).

:func:`start` formats a fresh storage directory with a random cluster id, then runs one
node that is broker and controller at once, with free loopback ports, a 512 MiB heap and
small segments, and returns once the node says it serves (``Kafka Server started``).
:meth:`KafkaNode.stop` shuts it down (SIGTERM: Kafka's controlled shutdown), killing it
only if it has not exited in time. Settings that differ from Kafka's defaults are listed
in ``peers/kafka.md`` and in :data:`SETTINGS`.

Example (not run as a doctest: it starts a JVM)::

    with start(Path(tempfile.mkdtemp()), partitions=8) as node:
        rows.write.format("kafka").option("kafka.bootstrap.servers", node.bootstrap)
            .option("topic", "t").save()   # a session with spark.jars = spark_jars()
"""

from __future__ import annotations

import base64
import collections
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "peers" / "kafka" / "pom.xml"
CACHE = ROOT / ".peers" / "kafka"
STARTED_LINE = "Kafka Server started"  # KafkaRaftServer, once the broker is unfenced
HEAP = "512m"
JVM_OPTIONS = (  # kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, heap made small
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
SEGMENT_BYTES = 64 << 20
START_TIMEOUT_S = 600.0  # a hang guard: two JVM starts take minutes on a loaded machine
STOP_TIMEOUT_S = 60.0
# Producer options for clients of this node on a loaded machine: kafka-clients gives up on a
# batch 120 s after creating it (delivery.timeout.ms), which a node starved of CPU (load
# average 40+ on 2 cores) has missed on its first writes. They change no figure of a run
# that works, only how long a stalled one waits before it fails.
PATIENT_PRODUCER = {"delivery.timeout.ms": "600000", "request.timeout.ms": "300000"}
SIGTERM_EXIT = 143  # a JVM's exit code after SIGTERM and its shutdown hooks: a clean stop
# Everything the node is given beyond its ports, paths and ids (peers/kafka.md says why).
SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # Our broker flushes asynchronously every 500 ms; Kafka by default leaves flushing to
    # the OS. Match ours: flush each log every 500 ms, checked every 500 ms.
    "log.flush.interval.ms": "500",
    "log.flush.scheduler.interval.ms": "500",
}
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


class KafkaPeerError(RuntimeError):
    """Kafka could not be fetched, formatted, started or stopped; ``output`` is its tail."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(f"{message}\n{output}" if output else message)
        self.output = output


# -- the jars -------------------------------------------------------------------------


def _stamp() -> Path:
    return CACHE / ".fetched"


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def fetch() -> Path:
    """Resolve both jar sets into :data:`CACHE` unless the cache matches the descriptor."""
    if _stamp().exists() and _stamp().read_text() == _pom_digest():
        return CACHE
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaPeerError(
            "mvn not found: ./dev (ensure_kafka_peer) installs Maven and fetches the jars"
        )
    for profile in ("server", "spark"):
        shutil.rmtree(CACHE / profile, ignore_errors=True)
        done = subprocess.run(
            [mvn, "-B", "-q", "-f", str(POM), "-P", profile, "dependency:copy-dependencies"],
            capture_output=True,
            text=True,
            timeout=1_800,
        )
        if done.returncode != 0:
            raise KafkaPeerError(f"maven could not fetch the {profile} jars", done.stdout[-3000:])
    _stamp().write_text(_pom_digest())
    return CACHE


def artifact(jar: Path) -> str:
    """``kafka-clients-3.9.2.jar`` → ``kafka-clients``: the name before ``-<digits>.<digit>``
    (so ``spark-sql-kafka-0-10_2.13-4.2.0.jar`` → ``spark-sql-kafka-0-10_2.13``)."""
    found = re.match(r"(.+?)-\d+\.\d", jar.stem)
    return found.group(1) if found else jar.stem


def spark_jars() -> list[Path]:
    """The connector's jars that the installed pyspark does not already ship."""
    import pyspark

    shipped = {artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    jars = sorted((fetch() / "spark").glob("*.jar"))
    return [j for j in jars if artifact(j) not in shipped]


def add_to_session(spark: Any) -> None:
    """Give a running SparkSession the connector (``ADD JAR``), for the calling thread.

    ``spark.jars`` is read only when the session's JVM starts. ``ADD JAR`` adds the jars to
    the executors and to the session's class loader, which Spark installs as the context
    class loader of the JVM thread that ran it: pyspark pins each Python thread to one JVM
    thread, so ``format("kafka")`` is found from this Python thread only. A session that
    starts with ``spark.jars`` set to :func:`spark_jars` sees the connector everywhere.
    """
    for jar in spark_jars():
        spark.sql(f"ADD JAR '{jar}'")


def versions() -> dict[str, str]:
    """The Kafka server and Spark connector versions in the cache (from the jar names)."""
    found = {}
    for profile, artifact in (("server", "kafka_2.13"), ("spark", "spark-sql-kafka-0-10_2.13")):
        jars = sorted((CACHE / profile).glob(f"{artifact}-*.jar"))
        found[artifact] = jars[-1].stem.removeprefix(f"{artifact}-") if jars else "not fetched"
    return found


# -- one node ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    """A random id in Kafka's Uuid text form (22 base64url characters, no leading '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _java(heap: str, workdir: Path) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise KafkaPeerError("java not found: ./dev installs Java 17")
    return [
        java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        "-cp",
        str(fetch() / "server" / "*"),
    ]


def _write_config(workdir: Path, port: int, controller_port: int, extra: dict[str, str]) -> Path:
    settings = {
        **SETTINGS,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(workdir / "data"),
        **extra,
    }
    config = workdir / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    (workdir / "log4j2.properties").write_text(LOG4J2)
    return config


@dataclass
class KafkaNode:
    """A running node: ``bootstrap`` is its ``127.0.0.1:port`` for clients."""

    bootstrap: str
    process: subprocess.Popen[str]
    workdir: Path
    output: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=200))
    serving: bool = False  # the node logged STARTED_LINE

    def stop(self) -> int:
        """Shut down (SIGTERM), killing only after :data:`STOP_TIMEOUT_S`; the exit code
        (:data:`SIGTERM_EXIT` for a clean stop)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            raise KafkaPeerError("kafka did not stop on SIGTERM; killed", self.tail()) from None

    def tail(self) -> str:
        return "".join(self.output)

    def __enter__(self) -> KafkaNode:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _format(workdir: Path, config: Path, heap: str) -> None:
    tool = [*_java(heap, workdir), "kafka.tools.StorageTool"]
    done = subprocess.run(
        [*tool, "format", "-t", _cluster_id(), "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise KafkaPeerError("kafka storage format failed", done.stdout + done.stderr)


def _drain(node: KafkaNode, event: threading.Event) -> None:
    """Keep the node's output flowing (a full pipe would stall it); flag the start line."""
    assert node.process.stdout is not None
    for line in node.process.stdout:
        node.output.append(line)
        if STARTED_LINE in line:
            node.serving = True
            event.set()
    event.set()  # the output ended (the process is gone): start() stops waiting


def start(
    workdir: Path,
    *,
    partitions: int = 1,
    segment_bytes: int = SEGMENT_BYTES,
    heap: str = HEAP,
) -> KafkaNode:
    """Format ``workdir`` and start one KRaft node there; returns once it serves.

    ``partitions`` is ``num.partitions``, the partition count of auto-created topics.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port, controller_port = _free_port(), _free_port()
    extra = {"num.partitions": str(partitions), "log.segment.bytes": str(segment_bytes)}
    config = _write_config(workdir, port, controller_port, extra)
    _format(workdir, config, heap)
    proc = subprocess.Popen(
        [*_java(heap, workdir), "kafka.Kafka", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=workdir,
    )
    node = KafkaNode(f"127.0.0.1:{port}", proc, workdir)
    event = threading.Event()
    threading.Thread(target=_drain, args=(node, event), daemon=True).start()
    event.wait(START_TIMEOUT_S)
    if not node.serving:
        proc.kill()
        code = proc.wait(30)
        raise KafkaPeerError(f"kafka did not start (exit code {code})", node.tail())
    return node


def main(argv: list[str]) -> int:
    """``python -m peers.kafka fetch``: resolve the jars; prints the versions."""
    if argv != ["fetch"]:
        print("usage: python -m peers.kafka fetch", file=sys.stderr)
        return 2
    fetch()
    for artifact, version in versions().items():
        print(f"{artifact} {version}")
    print(f"spark.jars: {os.pathsep.join(str(j) for j in spark_jars())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
