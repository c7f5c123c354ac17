"""Batch-send then pull-consume with the RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4).

    batch_and_pull.py NAMESRV TOPIC COUNT BATCH

Sends COUNT messages (body ``b-i``, tag ``TagA``/``TagB``) by ``send_batch`` in batches of
BATCH (SEND_BATCH_MESSAGE), then reads every queue from offset 0 with ``PullConsumer``
(PULL_MESSAGE without suspend, tag expression ``TagA``). Prints one JSON line per batch
sent (``{"batch", "status", "msg_id"}``) and one per message pulled (``{"body", "q", "o"}``).
"""

import argparse
import json

from rocketmq.client import Message, Producer, PullConsumer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("batch", type=int)
    args = p.parse_args()
    producer = Producer("cpp-batch-producer")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    try:
        for start in range(0, args.count, args.batch):
            msgs = []
            for i in range(start, min(start + args.batch, args.count)):
                msg = Message(args.topic)
                msg.set_tags("TagA" if i % 2 == 0 else "TagB")
                msg.set_keys(f"bk-{i}")
                msg.set_body(f"b-{i}")
                msgs.append(msg)
            result = producer.send_batch(msgs)
            print(
                json.dumps({"batch": start, "status": int(result.status), "msg_id": result.msg_id}),
                flush=True,
            )
    finally:
        producer.shutdown()
    consumer = PullConsumer("cpp-pull-group")
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    try:
        for msg in consumer.pull(args.topic, "TagA"):
            print(
                json.dumps({"body": msg.body.decode(), "q": msg.queue_id, "o": msg.queue_offset}),
                flush=True,
            )
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
