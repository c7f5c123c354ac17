"""The broker's trace recorder: hooks on the request paths, records written off them.

Each hook (``stored`` via the store's append observer, ``delivered``, ``settled``,
``record``) only appends what it saw to a buffer; a ``ServiceThread`` ("broker-trace")
wakes every ``trace_flush_interval_ms``, turns the buffer into records (``records.py``)
and appends them to ``RMQ_SYS_TRACE_TOPIC`` in messages of up to ``RECORDS_PER_MESSAGE``
records, each message's KEYS the buckets of the message ids it traces
(``protocol.trace_runs.bucket_key``: a few per append instead of an index entry per record; a
reader of an id queries its bucket and keeps that id's records).

Off (``trace_broker = "off"``, the default) costs the request paths one call and one
boolean check: each hook first tests :attr:`TraceRecorder.on`; no store observer is
installed and the thread does not run.

Crash contract: buffered records not yet written are lost with the process (a trace is
diagnostics, not data); the buffer is bounded (``MAX_PENDING`` hook calls: beyond it new
calls are dropped and counted in :attr:`dropped`). Hooks record only while the recorder
runs (a master, started): a slave's pulls buffer nothing. Threads: hooks may be called from any
thread (``deque.append`` is atomic); ``flush`` runs on the service thread (or in tests
while it is stopped).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from broker_core.broker.pop.model import PoppedMessage
from broker_core.broker.pull import PullRequest, PullResult
from broker_core.broker.topics import TopicConfig, TopicManager
from broker_core.broker.trace import appends, records
from broker_core.broker.trace.selection import TraceSelection
from broker_core.broker.transaction.transaction import EndResult, Resolution
from broker_core.config import BrokerConfig, trace_ratio
from broker_core.errors import CorruptionError, RocketMQError
from broker_core.message import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
    new_message_id,
)
from broker_core.protocol.trace import KEY_SEPARATOR, TRACE_TOPIC, TraceRecord
from broker_core.service_thread import ServiceThread
from broker_core.store.appended import Appended
from broker_core.store.message_store import MessageStore, PutResult
from broker_core.store.queue_read import QueueRead

log = logging.getLogger(__name__)

RECORDS_PER_MESSAGE = 256
MAX_KEYS_CHARS = 8_192  # of one trace message's KEYS (the property limit is 32 KiB)
MAX_PENDING = 10_000  # hook calls buffered (each may hold a pull's or a send's messages)
Builder = Callable[..., list[records.Chunk]]


class TraceRecorder:
    """Buffers the broker's trace hooks and writes their records to the trace topic."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicManager,
        config: BrokerConfig,
        clock_ms: Callable[[], int],
    ) -> None:
        self.selection = TraceSelection.parse(
            config.trace_broker, config.trace_topics, config.trace_groups
        )
        self.on = False  # True while started with a selection: hooks record only then
        self._store = store
        self._topics = topics
        self._topic_enable = config.trace_topic_enable
        self._clock_ms = clock_ms
        self._ctx = records.TraceContext(
            config.broker_name, config.endpoint, self.selection, self._read, self._read_at
        )
        self._flush_lock = threading.Lock()
        self._switch_lock = threading.Lock()  # start, stop and reselect
        self._started = False  # a started master: records while its selection is enabled
        self._observing = False  # the store's append observer is installed
        self._pending: deque[tuple[Builder, tuple[Any, ...]]] = deque()
        self.dropped = 0
        self.written = 0
        # CPU seconds the trace spent (``/metrics``): the stored hook on the request
        # paths (the busy one; the others only queue what they saw) and the flushes
        self.hook_cpu_s = 0.0
        self.flush_cpu_s = 0.0
        self.thread = ServiceThread(
            "broker-trace", self.flush, interval_ms=config.trace_flush_interval_ms
        )

    # ---- lifecycle ------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """Create RMQ_SYS_TRACE_TOPIC (one queue, as RocketMQ does) when the clients' traces
        (``trace_topic_enable``) or the broker's own records need it."""
        if (self._topic_enable or self.selection.enabled) and self._topics.get(TRACE_TOPIC) is None:
            self._topics.create_or_update(TopicConfig(TRACE_TOPIC, 1, 1))

    def start(self) -> None:
        """On a master (a slave copies its master's topics and writes nothing)."""
        with self._switch_lock:
            self._started = True
            self._switch_on()

    def _switch_on(self) -> None:
        self.ensure_topic()
        if self.selection.enabled and not self.on:
            if not self._observing:  # once: the observer returns at once while off
                self._observing = True
                self._store.add_append_observer(self.stored)
            self.on = True
            self.thread.start()

    def threads(self) -> list[ServiceThread]:
        """The recorder's thread when tracing is configured (health lists it then only)."""
        return [self.thread] if self.selection.enabled else []

    def stop(self) -> None:
        """Stop the thread and write what is buffered (the store is still open)."""
        with self._switch_lock:
            self._started = False
            self._switch_off()

    def _switch_off(self) -> None:
        if not self.on:
            return
        self.on = False
        self.thread.stop()
        try:
            self.flush()
        except Exception:  # a trace must not keep the broker from stopping
            log.exception("final trace flush failed")

    def reselect(self, setting: str) -> None:
        """``trace_broker`` changed while the broker runs (``live_config``): what was
        taken under the old setting is written as it was taken, then the new one holds
        (its topic and group lists stay); a started master starts or stops recording."""
        selection = dataclasses.replace(self.selection, ratio=trace_ratio(setting))
        with self._switch_lock:
            if selection.enabled:
                self.flush()
            else:
                self._switch_off()
            self.selection = selection
            self._ctx = dataclasses.replace(self._ctx, selection=selection, kinds={})
            if self._started:
                self._switch_on()

    # ---- hooks (call only when ``on``) ------------------------------------------------------

    def _add(self, builder: Builder, *args: Any) -> None:
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        self._pending.append((builder, args))

    def stored(self, batch: Appended) -> None:
        """The store's append observer: Stored, Retry and DLQ records (what the trace
        thread will need taken now, while the append is hot: ``appends.taken``)."""
        if self.on:
            start = time.thread_time()
            try:
                got = appends.taken(self._ctx, batch)
            except Exception:  # the append is stored: a trace must not fail it
                log.exception("taking an append for its trace failed")
                got = batch  # the thread's builder tries again, row by row
            if isinstance(got, appends.AppendRuns):
                self._add(appends.runs, got)
            elif got is not None:
                self._add(appends.stored, got)
            self.hook_cpu_s += time.thread_time() - start  # under the put lock: one at a time

    def delivered(
        self, group: str, client_id: str, popped: Sequence[PoppedMessage], invisible_ms: int
    ) -> None:
        if self.on and popped:
            self._add(records.delivered, self._clock_ms(), group, client_id, popped, invisible_ms)

    def settled(
        self,
        typ: str,
        group: str,
        client_id: str,
        topic: str,
        handle: str,
        invisible_ms: int | None = None,
    ) -> None:
        """An Ack, or a Nack (a new ``invisible_ms``), of a POP delivery."""
        if self.on:
            self._add(
                records.settled,
                self._clock_ms(),
                typ,
                group,
                client_id,
                topic,
                handle,
                invisible_ms,
            )

    def pulled(self, group: str, request: PullRequest, result: PullResult) -> None:
        """An offset pull's answer: a Delivered record (status ``pull``) per message."""
        if self.on and (result.messages or (result.raw is not None and result.raw.count)):
            self._add(
                records.pulled, self._clock_ms(), group, request.topic, request.queue_id, result
            )

    def watch_pull(
        self, group: str, request: PullRequest, callback: Callable[[PullResult], None]
    ) -> Callable[[PullResult], None]:
        """``callback`` that records the pull's answer (:meth:`pulled`) before passing it on
        (``callback`` itself when tracing is off)."""
        if not self.on:
            return callback

        def traced(result: PullResult) -> None:
            self.pulled(group, request, result)
            callback(result)

        return traced

    def fired(self, how: str, puts: Sequence[PutResult]) -> None:
        """Messages a timer (``how``: timer) or delay level put back into their topics."""
        if self.on and puts:
            self._add(records.fired, self._clock_ms(), how, puts)

    def record(self, record: TraceRecord) -> None:
        """A record a hook built whole (Commit, Rollback, Timer), with this broker's name."""
        self._add(records.single, record)

    def ended(self, result: EndResult, topic: str | None) -> None:
        """A transaction's Commit or Rollback (status ``check`` when a check-back decided)."""
        if not self.on:
            return
        put = result.delivered
        typ = "Commit" if result.resolution is Resolution.COMMIT else "Rollback"
        self.record(
            TraceRecord(
                typ,
                self._clock_ms(),
                self._ctx.broker_name,
                topic=put.topic if put is not None else topic or "",
                msg_id=result.message_id,
                host=self._ctx.host,
                queue_id=put.queue_id if put is not None else -1,
                offset=put.queue_offset if put is not None else -1,
                status="check" if result.from_check else "",
            )
        )

    # ---- the service thread -----------------------------------------------------------------

    def flush(self) -> int:
        """Build and write every buffered record; returns how many were written."""
        with self._flush_lock:  # records are written in the order the hooks saw them
            start = time.thread_time()
            try:
                return self._flush()
            finally:
                self.flush_cpu_s += time.thread_time() - start

    def _flush(self) -> int:
        keys: list[str] = []
        texts: list[str] = []
        while self._pending:
            builder, args = self._pending.popleft()
            try:
                for chunk_keys, chunk_texts in builder(self._ctx, *args):
                    keys += chunk_keys
                    texts += chunk_texts
            except Exception:  # one bad hook call must not lose the others' records
                log.exception("trace record of %s failed", builder.__name__)
        if texts:
            self._store.put_messages(self._messages(keys, texts))
            self.written += len(texts)
        return len(texts)

    def _messages(self, keys: list[str], texts: list[str]) -> list[Message]:
        """Trace messages of up to ``RECORDS_PER_MESSAGE`` records, each keyed by its
        records' keys (``keys[i]``: record i's, see ``records.Chunk``), at most
        ``MAX_KEYS_CHARS`` of them."""
        now = self._clock_ms()
        out = []
        start, count = 0, len(texts)
        while start < count:
            end = min(count, start + RECORDS_PER_MESSAGE)
            joined = _distinct(keys[start:end])
            while len(joined) > MAX_KEYS_CHARS and end - start > 1:
                end = start + (end - start) // 2
                joined = _distinct(keys[start:end])
            body = "".join(texts[start:end]).encode()
            props = {PROPERTY_KEYS: joined, PROPERTY_UNIQ_KEY: new_message_id()}
            out.append(Message(TRACE_TOPIC, body, 0, props, born_timestamp_ms=now))
            start = end
        return out

    def _read_at(self, phys: int) -> StoredMessage | None:
        try:
            return self._store.commitlog.read_message(phys)
        except RocketMQError:
            return None

    def _read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        store = self._store
        if not store.min_offset(topic, queue_id) <= offset < store.max_offset(topic, queue_id):
            return None
        try:
            got = store.get_messages(QueueRead(topic, queue_id, offset, 1))
        except CorruptionError:
            return None
        return got.messages[0] if got.messages else None


def _distinct(keys: list[str]) -> str:
    """The KEYS of a trace message whose records have ``keys``: each once."""
    return KEY_SEPARATOR.join(dict.fromkeys(keys))
