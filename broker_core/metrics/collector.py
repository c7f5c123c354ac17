"""The broker's metrics as Prometheus families, computed when Prometheus scrapes.

RocketMQ 5's metric names and labels (``cluster``, ``node_id`` on every series):

=================================  ======================  ===============================
rocketmq_messages_in_total         counter  topic          messages stored since start
rocketmq_messages_out_total        counter  topic, group   messages delivered since start
rocketmq_throughput_in_total       counter  topic          body bytes stored
rocketmq_throughput_out_total      counter  topic, group   body bytes delivered
rocketmq_rpc_latency               histogram (ms) method   gRPC call latency
rocketmq_consumer_lag_messages     gauge    topic, group   broker max offset − committed
                                                           (POP only: − lowest unacked)
rocketmq_consumer_ready_messages   gauge    topic, group   never delivered (POP: above the
                                                           scan frontier; pulls: the lag)
rocketmq_consumer_inflight_messages gauge   topic, group   delivered, not yet acked
rocketmq_storage_size              gauge    (bytes)        files under the store directory
rocketmq_storage_flush_latency     gauge    (ms)           the last commitlog flush
rocketmq_topic_number              gauge                   user topics
rocketmq_consumer_group_number     gauge                   consumer groups
rocketmq_dedup_ids                 gauge                   message ids in the dedup window
rocketmq_dedup_memory_bytes        gauge    (bytes)        its estimated memory
rocketmq_dedup_repeats_total       counter                 sends answered from the window
rocketmq_dedup_cpu_seconds_total   counter                 CPU of the window's own work on
                                                           the send path (claims, settles;
                                                           one send in 8 timed, ×8)
rocketmq_trace_records_total       counter                 the broker's own trace records
                                                           written (``trace_broker``)
rocketmq_trace_dropped_total       counter                 trace hook calls dropped (the
                                                           buffer was full)
rocketmq_trace_cpu_seconds_total   counter  part           CPU the broker's trace used:
                                                           ``hook`` (taking each append on
                                                           the send path), ``thread``
                                                           (building and writing records)
=================================  ======================  ===============================

(``group`` is the label ``consumer_group``.) Lag and storage are read from the broker
at scrape time, so they cost nothing between scrapes. Families come from
``prometheus_client``; its HTTP server exposes them (:func:`serve`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from broker_core.broker.broker import Broker
from broker_core.broker.system_topics import is_system_topic
from broker_core.metrics.recorder import LATENCY_BUCKETS_MS, Recorder

log = logging.getLogger(__name__)

NODE = ["cluster", "node_id"]
TOPIC = ["topic", *NODE]
GROUP = ["topic", "consumer_group", *NODE]


def store_size_bytes(store_dir: str | Path) -> int:
    """Bytes of every file under ``store_dir`` (segments count at their mapped size)."""
    total = 0
    for root, _dirs, files in os.walk(store_dir):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # deleted by retention while we walked
                continue
    return total


class BrokerCollector(Collector):
    """Reads a :class:`Recorder` and a :class:`Broker`; register it once per broker."""

    def __init__(self, broker: Broker, recorder: Recorder, *, cluster: str) -> None:
        self.broker = broker
        self.recorder = recorder
        self.node = [cluster, broker.config.broker_name]

    def collect(self) -> Iterator[Metric]:
        yield from self._traffic()
        yield self._latency()
        try:
            yield from self._consumers()
            yield from self._storage()
        except Exception:  # a scrape must not fail because a topic was deleted meanwhile
            log.exception("metrics: reading broker state failed")

    def _traffic(self) -> Iterator[Metric]:
        msgs_in = CounterMetricFamily(
            "rocketmq_messages_in_total", "Messages stored, by topic", labels=TOPIC
        )
        bytes_in = CounterMetricFamily(
            "rocketmq_throughput_in_total", "Message body bytes stored, by topic", labels=TOPIC
        )
        for topic, (count, size) in sorted(self.recorder.snapshot_in().items()):
            msgs_in.add_metric([topic, *self.node], count)
            bytes_in.add_metric([topic, *self.node], size)
        msgs_out = CounterMetricFamily(
            "rocketmq_messages_out_total",
            "Messages delivered, by topic and consumer group",
            labels=GROUP,
        )
        bytes_out = CounterMetricFamily(
            "rocketmq_throughput_out_total", "Message body bytes delivered", labels=GROUP
        )
        for (topic, group), (count, size) in sorted(self.recorder.snapshot_out().items()):
            msgs_out.add_metric([topic, group, *self.node], count)
            bytes_out.add_metric([topic, group, *self.node], size)
        yield from (msgs_in, bytes_in, msgs_out, bytes_out)

    def _latency(self) -> Metric:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency", "gRPC call latency in ms", labels=["method", *NODE]
        )
        bounds = [str(b) for b in LATENCY_BUCKETS_MS] + ["+Inf"]
        for method, (cumulative, total_ms) in sorted(self.recorder.snapshot_latency().items()):
            family.add_metric(
                [method, *self.node], list(zip(bounds, cumulative, strict=True)), sum_value=total_ms
            )
        return family

    def _consumers(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages not yet committed by the group",
            labels=GROUP,
        )
        ready = GaugeMetricFamily(
            "rocketmq_consumer_ready_messages",
            "Messages not yet delivered to the group",
            labels=GROUP,
        )
        inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages", "Messages delivered, not yet acked", labels=GROUP
        )
        groups = self.broker.groups.list()
        for config in groups:
            totals: dict[str, list[int]] = {}
            for topic, *counts in self._queues(config.name):
                row = totals.setdefault(topic, [0, 0, 0])
                for i, n in enumerate(counts):
                    row[i] += n
            for topic, (queue_lag, queue_ready, held) in sorted(totals.items()):
                labels = [topic, config.name, *self.node]
                lag.add_metric(labels, queue_lag)
                ready.add_metric(labels, queue_ready)
                inflight.add_metric(labels, held)
        yield from (lag, ready, inflight)
        groups_n = GaugeMetricFamily(
            "rocketmq_consumer_group_number", "Consumer groups", labels=NODE
        )
        groups_n.add_metric(self.node, len(groups))
        topics_n = GaugeMetricFamily("rocketmq_topic_number", "User topics", labels=NODE)
        topics_n.add_metric(
            self.node, sum(1 for t in self.broker.topics.list() if not is_system_topic(t.name))
        )
        yield from (groups_n, topics_n)

    def _queues(self, group: str) -> Iterator[tuple[str, int, int, int]]:
        """(topic, lag, ready, in flight) of every queue ``group`` committed to or popped
        from. Lag counts from the committed offset (queues only popped from: from the
        lowest offset not yet acked); ready is what was never delivered (for offset-based
        pulls, which the broker does not follow, the lag)."""
        popped = self.broker.pop.progress_of(group)
        for topic, qid, high, _offset, queue_lag in self.broker.consumer_groups.group_progress(
            group
        ):
            state = popped.pop((topic, qid), None)
            if state is None:
                yield topic, queue_lag, queue_lag, 0
            else:
                yield topic, queue_lag, min(queue_lag, max(0, high - state[1])), state[2]
        for (topic, qid), (consume_offset, frontier, held) in sorted(popped.items()):
            if (
                topic.startswith(("%RETRY%", "%DLQ%"))
                or is_system_topic(topic)
                or self.broker.topics.get(topic) is None
            ):
                continue
            high = self.broker.store.max_offset(topic, qid)
            yield topic, max(0, high - consume_offset), max(0, high - frontier), held

    def _storage(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("rocketmq_storage_size", "Bytes of the store's files", labels=NODE)
        size.add_metric(self.node, store_size_bytes(self.broker.store.config.store_dir))
        flush = GaugeMetricFamily(
            "rocketmq_storage_flush_latency",
            "Duration of the last commitlog flush in ms",
            labels=NODE,
        )
        flush.add_metric(self.node, self.broker.store.flusher.last_flush_ms)
        yield from (size, flush)
        yield from self._dedup()
        yield from self._trace()

    def _dedup(self) -> Iterator[Metric]:
        """The idempotent-send window (``broker/dedup``): its size, memory and repeats."""
        window = self.broker.sender.window
        ids = GaugeMetricFamily(
            "rocketmq_dedup_ids", "Message ids in the dedup window", labels=NODE
        )
        ids.add_metric(self.node, window.size())
        memory = GaugeMetricFamily(
            "rocketmq_dedup_memory_bytes", "Estimated memory of the dedup window", labels=NODE
        )
        memory.add_metric(self.node, window.memory_bytes())
        repeats = CounterMetricFamily(
            "rocketmq_dedup_repeats", "Sends answered from the dedup window", labels=NODE
        )
        repeats.add_metric(self.node, window.repeats)
        cpu = CounterMetricFamily(
            "rocketmq_dedup_cpu_seconds",
            "CPU seconds of the dedup window's own work on the send path (claims and settles;"
            " one send in 8 timed, counted 8 times)",
            labels=NODE,
        )
        cpu.add_metric(self.node, window.cpu_s)
        yield from (ids, memory, repeats, cpu)

    def _trace(self) -> Iterator[Metric]:
        """The broker's own trace (``broker/trace``): records written, hook calls dropped,
        and its CPU, so what tracing costs can be read off a running broker."""
        trace = self.broker.trace
        written = CounterMetricFamily(
            "rocketmq_trace_records", "The broker's own trace records written", labels=NODE
        )
        written.add_metric(self.node, trace.written)
        dropped = CounterMetricFamily(
            "rocketmq_trace_dropped", "Trace hook calls dropped (buffer full)", labels=NODE
        )
        dropped.add_metric(self.node, trace.dropped)
        cpu = CounterMetricFamily(
            "rocketmq_trace_cpu_seconds",
            "CPU seconds the broker's trace used, on the send path (hook) and its thread",
            labels=["part", *NODE],
        )
        cpu.add_metric(["hook", *self.node], trace.hook_cpu_s)
        cpu.add_metric(["thread", *self.node], trace.flush_cpu_s)
        yield from (written, dropped, cpu)


def serve(listen: str, broker: Broker, recorder: Recorder, *, cluster: str) -> Any:
    """Start the ``/metrics`` HTTP server on ``listen`` (HOST:PORT); returns the server
    (``shutdown()`` stops it). OSError when the address cannot be bound."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise OSError(f"--metrics-listen must be HOST:PORT, got {listen!r}")
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker, recorder, cluster=cluster))
    server, _thread = start_http_server(int(port), addr=host, registry=registry)
    return server
