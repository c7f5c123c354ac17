"""store-append: 1 KB messages through the store vs raw writes of the same bytes.

Two measurements, same machine, same run, same directory:

Each append measurement runs three times, alternating with its baseline; medians count.
The store runs in this process with the broker's garbage-collector settings
(``server.app``: what exists is frozen out of the collector's view, young collections
every 50,000 allocations); otherwise every collection would walk the bench's 200,000
prepared messages, a cost no broker pays.

* **append** — batches of 64 messages of 1 KiB through ``MessageStore.put_messages``
  (async flush), timed until every append returned *and* dispatch caught up (so the
  figure is sustainable throughput, not a burst into an unbounded backlog); baseline:
  the same number of bytes written with a plain sequential ``os.write`` loop, one write
  per message, to a preallocated file.
* **sync** — 64 threads each appending one message at a time with ``flush_mode=sync``
  (every append returns only when fdatasync covers it; concurrent appends share one
  sync); baseline: one thread writing the same messages in batches of 64 with
  ``os.writev`` followed by ``os.fdatasync``. The ratio is of ``put_message`` (the
  per-message API: concurrent calls also share one append, ``store.put_combiner``); the
  details also give 64 threads each calling ``put_batch`` with one encoded message, the
  path of a gRPC SendMessage, where only the fdatasync is shared (``sync_put_batch_*``).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.report import Result
from broker_core.config import MIB, FlushMode, StoreConfig
from broker_core.message import Message
from broker_core.store.columns import encode_messages
from broker_core.store.message_store import MessageStore

BODY_BYTES = 1024
BATCH = 64
APPENDERS = 64
SIZES = {"tiny": (4_000, 1_280), "full": (200_000, 25_600)}  # (append msgs, sync msgs)
ROUNDS = 3


def _messages(count: int) -> list[Message]:
    body = bytes(range(256)) * (BODY_BYTES // 256)
    return [
        Message("bench", body, queue_id=i % 8, properties={"UNIQ_KEY": f"B{i:012d}"})
        for i in range(count)
    ]


def _store(directory: Path, sync: bool, segment_bytes: int) -> MessageStore:
    store = MessageStore(
        StoreConfig(
            store_dir=str(directory),
            segment_size_bytes=segment_bytes,
            flush_mode=FlushMode.SYNC if sync else FlushMode.ASYNC,
            max_dispatch_lag_bytes=1 << 40,
            max_flush_lag_bytes=1 << 40,
            index_max_entries=1_000_000,
        )
    )
    store.open()
    return store


def _ours_append(directory: Path, messages: list[Message]) -> tuple[float, float, int]:
    store = _store(directory, sync=False, segment_bytes=256 * MIB)
    try:
        start = time.perf_counter()
        for i in range(0, len(messages), BATCH):
            store.put_messages(messages[i : i + BATCH])
        appended = time.perf_counter() - start
        store.wait_dispatched(600)
        dispatched = time.perf_counter() - start
        return appended, dispatched, store.commitlog.max_offset
    finally:
        store.close()


def _raw_write(path: Path, total_bytes: int, count: int) -> float:
    unit = os.urandom(total_bytes // count)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, total_bytes + 1)
        start = time.perf_counter()
        for _ in range(count):
            os.write(fd, unit)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def _put_message(store: MessageStore, message: Message) -> None:
    store.put_message(message)


def _put_batch(store: MessageStore, message: Message) -> None:
    cfg = store.config
    store.put_batch(
        encode_messages(
            [message],
            max_body_bytes=cfg.max_body_bytes,
            max_properties_bytes=cfg.max_properties_bytes,
        )
    )


def _ours_sync(
    directory: Path,
    messages: list[Message],
    put: Callable[[MessageStore, Message], None] = _put_message,
) -> tuple[float, int]:
    store = _store(directory, sync=True, segment_bytes=64 * MIB)
    per_thread = len(messages) // APPENDERS
    barrier = threading.Barrier(APPENDERS + 1)

    def appender(t: int) -> None:
        barrier.wait()
        for m in messages[t * per_thread : (t + 1) * per_thread]:
            put(store, m)

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(APPENDERS)]
    try:
        for w in workers:
            w.start()
        barrier.wait()
        start = time.perf_counter()
        for w in workers:
            w.join()
        return time.perf_counter() - start, store.flusher.flush_count
    finally:
        store.close()


def _raw_writev_fdatasync(path: Path, unit_bytes: int, count: int) -> float:
    units = [os.urandom(unit_bytes) for _ in range(BATCH)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, unit_bytes * count + 1)
        start = time.perf_counter()
        for _ in range(count // BATCH):
            os.writev(fd, units)
            os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def run(size: str) -> list[Result]:
    n_append, n_sync = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix="bench-store-", dir=os.environ.get("BENCH_DIR")))
    thresholds = gc.get_threshold()
    try:
        msgs = _messages(n_append)
        gc.freeze()  # as the broker does at start-up (see the module docstring)
        gc.set_threshold(50_000, 20, 20)
        runs = []
        for i in range(ROUNDS):  # alternate ours and the baseline; keep each one's median
            appended_s, dispatched_s, total = _ours_append(root / f"ours{i}", msgs)
            runs.append(
                (dispatched_s, appended_s, _raw_write(root / f"raw{i}.bin", total, n_append))
            )
            shutil.rmtree(root / f"ours{i}", ignore_errors=True)
            (root / f"raw{i}.bin").unlink()
        dispatched_s = statistics.median(r[0] for r in runs)
        appended_s = statistics.median(r[1] for r in runs)
        raw_s = statistics.median(r[2] for r in runs)
        sync_msgs = msgs[:n_sync]
        sync_s, syncs = _ours_sync(root / "ours-sync", sync_msgs)
        batch_s, batch_syncs = _ours_sync(root / "ours-sync-batch", sync_msgs, _put_batch)
        unit = total // n_append
        raw_sync_s = _raw_writev_fdatasync(root / "raw-sync.bin", unit, n_sync)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        shutil.rmtree(root, ignore_errors=True)
    mb = total / MIB
    ours, base = mb / dispatched_s, mb / raw_s
    sync_rate, raw_sync_rate = n_sync / sync_s, n_sync / raw_sync_s
    result = Result(
        "store-append",
        ours,
        base,
        "MB/s",
        goal=0.6,
        details={
            "messages": n_append,
            "body_bytes": BODY_BYTES,
            "unit_bytes": unit,
            "batch": BATCH,
            "append_only_mb_s": round(mb / appended_s, 1),
            "sync_msgs": n_sync,
            "sync_appenders": APPENDERS,
            "sync_ours_msg_s": round(sync_rate),
            "sync_baseline_msg_s": round(raw_sync_rate),
            "sync_fdatasyncs": syncs,
            "sync_ratio": round(sync_rate / raw_sync_rate, 3),
            "sync_put_batch_msg_s": round(n_sync / batch_s),
            "sync_put_batch_fdatasyncs": batch_syncs,
            "sync_goal": 0.5,
        },
    )
    result.rows = [
        (
            "append + dispatch (ours)",
            f"{ours:,.1f} MB/s",
            f"{n_append:,} × {unit} B, batch {BATCH}",
        ),
        ("append only (ours)", f"{mb / appended_s:,.1f} MB/s", "until put_messages returned"),
        ("os.write loop (baseline)", f"{base:,.1f} MB/s", "one write per message"),
        (
            "sync group commit (ours)",
            f"{sync_rate:,.0f} msg/s",
            f"{APPENDERS} appenders, {syncs} fdatasyncs",
        ),
        (
            "sync, put_batch of 1 (ours)",
            f"{n_sync / batch_s:,.0f} msg/s",
            f"SendMessage's path, {batch_syncs} fdatasyncs",
        ),
        ("writev+fdatasync (baseline)", f"{raw_sync_rate:,.0f} msg/s", f"batches of {BATCH}"),
        ("sync ratio", f"{sync_rate / raw_sync_rate:.3f}", "goal ≥ 0.5"),
    ]
    return [result]
