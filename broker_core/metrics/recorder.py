"""Hot-path counters of the broker, cheap to bump and read out at scrape time.

The send and receive paths call :meth:`Recorder.messages_in` / :meth:`messages_out` once
per *request* (with the request's message count and body bytes), and the gate's timing
wrapper calls :meth:`rpc` once per call. Each is a dict lookup and a few integer adds
under one uncontended lock — no ``prometheus_client`` object on the hot path; the
collector (``collector.py``) turns these into metric families when Prometheus scrapes.

Counts are exact (the lock makes each update atomic); the RPC latency buckets are
milliseconds, as RocketMQ's ``rocketmq_rpc_latency``.
"""

from __future__ import annotations

import bisect
import threading
from typing import Final

LATENCY_BUCKETS_MS: Final = (1.0, 3.0, 5.0, 10.0, 50.0, 100.0, 300.0, 1_000.0, 3_000.0, 10_000.0)


class Recorder:
    """Counters by topic, by (topic, group) and by RPC method; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in: dict[str, list[int]] = {}  # topic -> [messages, bytes]
        self._out: dict[tuple[str, str], list[int]] = {}  # (topic, group) -> [messages, bytes]
        # method -> per-bucket counts (one more for +Inf), then [count, sum_ms]
        self._latency: dict[str, tuple[list[int], list[float]]] = {}

    def messages_in(self, topic: str, count: int, body_bytes: int) -> None:
        """``count`` messages of ``body_bytes`` in all were stored in ``topic``."""
        with self._lock:
            row = self._in.get(topic)
            if row is None:
                row = self._in[topic] = [0, 0]
            row[0] += count
            row[1] += body_bytes

    def messages_out(self, topic: str, group: str, count: int, body_bytes: int) -> None:
        """``count`` messages of ``body_bytes`` were delivered from ``topic`` to ``group``."""
        key = (topic, group)
        with self._lock:
            row = self._out.get(key)
            if row is None:
                row = self._out[key] = [0, 0]
            row[0] += count
            row[1] += body_bytes

    def rpc(self, method: str, elapsed_ms: float) -> None:
        """One call of ``method`` took ``elapsed_ms``."""
        slot = bisect.bisect_left(LATENCY_BUCKETS_MS, elapsed_ms)
        with self._lock:
            entry = self._latency.get(method)
            if entry is None:
                entry = self._latency[method] = ([0] * (len(LATENCY_BUCKETS_MS) + 1), [0, 0.0])
            entry[0][slot] += 1
            entry[1][0] += 1
            entry[1][1] += elapsed_ms

    def snapshot_in(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            return {topic: (row[0], row[1]) for topic, row in self._in.items()}

    def snapshot_out(self) -> dict[tuple[str, str], tuple[int, int]]:
        with self._lock:
            return {key: (row[0], row[1]) for key, row in self._out.items()}

    def snapshot_latency(self) -> dict[str, tuple[list[int], float]]:
        """Per method: cumulative bucket counts (the last is +Inf = count) and the sum."""
        with self._lock:
            raw = {m: (list(b), float(t[1])) for m, (b, t) in self._latency.items()}
        result = {}
        for method, (buckets, total_ms) in raw.items():
            running, cumulative = 0, []
            for n in buckets:
                running += n
                cumulative.append(running)
            result[method] = (cumulative, total_ms)
        return result
