"""Turn metrics on for one ``BrokerServer``: counters, call timing and ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from broker_core.metrics.collector import serve
from broker_core.metrics.recorder import Recorder
from broker_core.metrics.timing import timing_wrapper

if TYPE_CHECKING:
    from broker_core.server.app import BrokerServer

CLUSTER: Final = "DefaultCluster"  # RocketMQ's default cluster name (label ``cluster``)


def install_metrics(server: BrokerServer, listen: str) -> Recorder:
    """Count on ``server``'s hot paths and serve ``GET /metrics`` on ``listen``
    (HOST:PORT); the HTTP server stops with ``server.stop``. OSError if it cannot bind."""
    recorder = Recorder()
    try:
        http = serve(listen, server.broker, recorder, cluster=CLUSTER)
    except OSError as exc:
        raise OSError(f"--metrics-listen {listen}: {exc}") from exc
    server.ctx.metrics = recorder
    server.gate.wrappers.append(timing_wrapper(recorder))
    server.on_stop.append(http.shutdown)
    server.metrics_endpoint = f"{listen.rpartition(':')[0]}:{http.server_port}"
    return recorder
