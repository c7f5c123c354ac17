"""The storage demo: write real messages through the store, crash, recover, read back.

Run it with ``./dev demo``. It stores order events in a fresh store directory, reads them
back by queue offset, by key and by time, closes the store cleanly, appends more in a child
process that is SIGKILLed mid-stream, reopens the store and shows what recovery found.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from broker_core.config import MIB, FlushMode, StoreConfig
from broker_core.message import Message, new_message_id
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead

TOPIC = "orders"
QUEUES = 4


def config(store_dir: Path, flush_mode: FlushMode = FlushMode.ASYNC) -> StoreConfig:
    return StoreConfig(
        store_dir=str(store_dir),
        segment_size_bytes=MIB // 4,
        max_body_bytes=64 * 1024,
        flush_mode=flush_mode,
    )


def order_event(i: int, rng: random.Random) -> Message:
    order_id, customer = f"o-{i:06d}", f"c-{rng.randrange(50):03d}"
    status = rng.choice(["created", "paid", "shipped"])
    order = {
        "order_id": order_id,
        "customer": customer,
        "status": status,
        "amount_cents": rng.randrange(100, 50_000),
    }
    return Message(
        TOPIC,
        json.dumps(order).encode(),
        queue_id=i % QUEUES,
        properties={
            "TAGS": status,
            "KEYS": order_id,
            "UNIQ_KEY": new_message_id(),
            "customer": customer,
        },
    )


def write_and_read(store_dir: Path) -> None:
    rng = random.Random(42)
    store = MessageStore(config(store_dir))
    store.open()
    start_ms = int(time.time() * 1000)
    results = store.put_messages([order_event(i, rng) for i in range(2_000)])
    if not store.wait_dispatched():
        raise SystemExit("dispatch did not catch up within 10 s")
    print(
        f"appended {len(results)} order events to {len(store.commitlog.segments())} "
        f"commitlog segments ({store.commitlog.max_offset:,} bytes)"
    )
    for qid in range(QUEUES):
        got = store.get_messages(QueueRead(TOPIC, qid, 0, 3))
        first = json.loads(got.messages[0].body)
        print(
            f"  queue {qid}: offsets [{store.min_offset(TOPIC, qid)}, "
            f"{store.max_offset(TOPIC, qid)}), first order {first['order_id']} "
            f"({got.messages[0].tag})"
        )
    hit = store.query_by_key("o-001234")[0]
    print(f"by key o-001234 → queue {hit.queue_id} offset {hit.queue_offset}: {hit.body.decode()}")
    same = store.query_by_id(results[77].message_id)
    print(f"by message id {results[77].message_id} → {json.loads(same.body)['order_id']}")
    offset = store.offset_for_timestamp(TOPIC, 0, start_ms)
    print(f"first offset of queue 0 stored at or after the start time: {offset}")
    store.close()
    print("closed cleanly (checkpoint written)")


def crash_and_recover(store_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "examples.storage_demo", "--child", str(store_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked = 0
    for line in child.stdout:
        acked = int(line)
        if acked >= 300:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    print(f"child appended with sync flush and was SIGKILLed after {acked} acknowledged sends")
    store = MessageStore(config(store_dir))
    report = store.open()
    print(f"recovery: {report.summary()}")
    total = sum(store.max_offset(TOPIC, q) for q in range(QUEUES))
    print(f"messages readable after recovery: {total} (2000 before the crash + ≥ {acked} acked)")
    assert total >= 2_000 + acked, "an acknowledged message was lost"
    store.close()


def child(store_dir: Path) -> None:
    rng = random.Random(7)
    store = MessageStore(config(store_dir, flush_mode=FlushMode.SYNC))
    store.open()
    for i in range(10_000):
        store.put_message(order_event(10_000 + i, rng))
        print(i + 1, flush=True)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]))
        return
    root = Path(tempfile.mkdtemp(prefix="rocketmq-demo-"))
    store_dir = root / "store"
    print(f"store directory: {store_dir}")
    write_and_read(store_dir)
    crash_and_recover(store_dir)
    print("files:", ", ".join(sorted(p.name for p in store_dir.iterdir())))
    if not os.environ.get("KEEP_DEMO_STORE"):
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
