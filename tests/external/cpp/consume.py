"""Push-consume with the RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4), given a NameServer.

Run with the ``.venv-cpp`` interpreter::

    consume.py NAMESRV TOPIC GROUP [--orderly] [--expression EXPR] [--fail-prefix P]

Prints ``READY`` once started, then one JSON line per delivery: ``{"topic", "q", "o",
"body", "tags", "reconsume", "id", "t"}`` (``t``: when it arrived, epoch s); stops
(shutdown, exit 0) when its standard input closes or reads ``stop``. A message whose body
starts with ``--fail-prefix`` is answered RECONSUME_LATER (the client then sends it back
to the broker with CONSUMER_SEND_MSG_BACK).

The library's ``subscribe`` turns a callback's exception into CONSUME_SUCCESS (ctypes
swallows what its ``finally: raise`` re-raises), so RECONSUME_LATER is returned through
the library's own C callback registration (``_register_callback``) with the C status code.
"""

import argparse
import json
import sys
import threading
import time

from rocketmq.client import PushConsumer, RecvMessage, dll, ffi_check
from rocketmq.ffi import _CConsumeStatus

_lock = threading.Lock()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("--orderly", action="store_true")
    p.add_argument("--expression", default="*")
    p.add_argument("--fail-prefix", default=None)
    p.add_argument("--instance", default=None)
    args = p.parse_args()
    fail = args.fail_prefix.encode() if args.fail_prefix else None

    def on_message(_consumer, handle):  # type: ignore[no-untyped-def]
        msg = RecvMessage(handle)
        body = msg.body
        line = {
            "topic": msg.topic,
            "q": msg.queue_id,
            "o": msg.queue_offset,
            "body": body.decode(),
            "tags": (msg.tags or b"").decode(),
            "reconsume": msg.reconsume_times,
            "id": msg.id,
            "t": time.time(),
        }
        with _lock:
            print(json.dumps(line), flush=True)
        if fail is not None and body.startswith(fail):
            return _CConsumeStatus.RECONSUME_LATER.value
        return _CConsumeStatus.CONSUME_SUCCESS.value

    consumer = PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    if args.instance:
        consumer.set_instance_name(args.instance)
    ffi_check(dll.Subscribe(consumer._handle, args.topic.encode(), args.expression.encode()))
    consumer._register_callback(on_message)
    with _lock:  # every line under the lock: print writes the text and the newline apart,
        # and an unlocked READY once landed inside a delivered message's line (the C++
        # client delivers before start() returns), which the reading test could not parse
        print("STARTING", flush=True)  # a start that never returned, apart from one never begun
    consumer.start()
    with _lock:
        print("READY", flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    consumer.shutdown()


if __name__ == "__main__":
    main()
