"""Launch Spark's JVM gateway without fork(): the test process runs gRPC threads.

pyspark starts ``spark-submit`` with ``Popen(preexec_fn=...)`` (to ignore SIGINT in the
JVM). A ``preexec_fn`` forces a real ``fork()``, and every fork runs gRPC's
``pthread_atfork`` handlers; with gRPC threads busy in another thread of this process
(official clients, channels of earlier tests) gRPC logs "Other threads are currently
calling into gRPC, skipping fork() handlers" and the child runs Python code on a copy
of locks other threads held. Now and then that child died before it could ``exec`` the
JVM: pyspark reported JAVA_GATEWAY_EXITED and no JVM output appeared.

Here the same command is started without a ``preexec_fn`` (so ``vfork``/``exec``: no
atfork handler, no Python code in the child) in a session of its own (no terminal
SIGINT, which is what the ``preexec_fn`` was for); pyspark then connects to it through
its documented ``PYSPARK_GATEWAY_PORT``/``PYSPARK_GATEWAY_SECRET`` hand-over.

Wire format of the connection file the gateway writes (Spark's ``PythonGatewayServer``)::

    port:        int32 big endian
    secret_len:  int32 big endian
    secret:      secret_len bytes, UTF-8
"""

from __future__ import annotations

import os
import shlex
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import SparkSession

LAUNCH_TIMEOUT_S = 120.0


class GatewayLaunchError(RuntimeError):
    """spark-submit ended (or stalled) before writing its connection file."""

    def __init__(self, returncode: int | None, waited_s: float) -> None:
        super().__init__(
            f"Spark's gateway JVM did not start: exit code {returncode} after {waited_s:.1f} s"
        )
        self.returncode = returncode
        self.waited_s = waited_s


@dataclass
class Gateway:
    """A running gateway JVM; closing its stdin makes it exit (PythonGatewayServer)."""

    proc: subprocess.Popen[bytes]
    port: int
    secret: str

    def stop(self, timeout_s: float = 60) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout_s)


def launch(conf: dict[str, str]) -> Gateway:
    """Start ``spark-submit ... pyspark-shell`` as pyspark would, minus the fork."""
    command = [os.path.join(_find_spark_home(), "bin", "spark-submit")]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    with tempfile.TemporaryDirectory(prefix="spark-gw-") as tmp:
        info = Path(tmp) / "conn-info"
        env = dict(os.environ, SPARK_CONNECT_MODE="0", _PYSPARK_DRIVER_CONN_INFO_PATH=str(info))
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, start_new_session=True)
        started = time.monotonic()
        while not info.is_file():  # the JVM renames the file into place when complete
            waited = time.monotonic() - started
            if proc.poll() is not None or waited > LAUNCH_TIMEOUT_S:
                proc.kill()
                raise GatewayLaunchError(proc.wait(), waited)
            time.sleep(0.05)
        data = info.read_bytes()
    port, length = struct.unpack(">ii", data[:8])
    return Gateway(proc, port, data[8 : 8 + length].decode())


def session_on(gateway: Gateway, builder: SparkSession.Builder) -> SparkSession:
    """``builder.getOrCreate()`` on ``gateway``; the hand-over variables are removed after,
    so no later subprocess (a spark-submit of a test) inherits them."""
    os.environ["PYSPARK_GATEWAY_PORT"] = str(gateway.port)
    os.environ["PYSPARK_GATEWAY_SECRET"] = gateway.secret
    try:
        return builder.getOrCreate()
    finally:
        del os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"]
