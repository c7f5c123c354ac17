"""A child process that appends to a store and is killed by its parent mid-flight.

Usage: python -m tests.store.crash_child STORE_DIR FLUSH_MODE COUNT
Prints one line per acknowledged append: "ack <queue offset> <uniq key>", flushed at
once, then sleeps (without closing the store) until killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from broker_core.store.message_store import MessageStore
from tests.store.conftest import make_message, small_config


def main() -> None:
    store_dir, mode, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = MessageStore(
        small_config(
            store_dir, flush_mode=mode, flush_interval_ms=60_000, derived_flush_interval_ms=60_000
        )
    )
    store.open()
    for i in range(count):
        msg = make_message(i, queue_id=i % 2)
        result = store.put_message(msg)
        sys.stdout.write(f"ack {result.queue_offset} {result.message_id}\n")
        sys.stdout.flush()
    sys.stdout.write("done\n")
    sys.stdout.flush()
    time.sleep(600)


if __name__ == "__main__":
    main()
