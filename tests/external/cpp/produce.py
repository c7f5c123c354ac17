"""Send messages with the RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4), given a NameServer.

Run with the ``.venv-cpp`` interpreter (never the project's: both install ``rocketmq``)::

    produce.py NAMESRV TOPIC COUNT [--delay-every N] [--orderly-keys K] [--body-prefix P]
               [--access-key AK --secret-key SK]

Message ``i`` has body ``P-i``, key ``k-i``, tag ``TagA`` (even i) / ``TagB`` (i % 3 == 1) /
none; every Nth message has delay level 1 (1 s). With ``--orderly-keys K`` messages go by
``send_orderly`` with sharding key ``i % K`` (so one key's messages share a queue).
Prints one JSON line per message: ``{"i", "status", "msg_id", "offset"}``. With
``--access-key`` the producer signs its requests (``set_session_credentials``, 4.x ACL).
"""

import argparse
import json

from rocketmq.client import Message, Producer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("--delay-every", type=int, default=0)
    p.add_argument("--orderly-keys", type=int, default=0)
    p.add_argument("--body-prefix", default="m")
    p.add_argument("--group", default="cpp-producer")
    p.add_argument("--access-key", default="")
    p.add_argument("--secret-key", default="")
    args = p.parse_args()
    producer = Producer(args.group)
    producer.set_namesrv_addr(args.namesrv)
    if args.access_key:
        producer.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")
    producer.start()
    try:
        for i in range(args.count):
            msg = Message(args.topic)
            msg.set_keys(f"k-{i}")
            if i % 2 == 0:
                msg.set_tags("TagA")
            elif i % 3 == 1:
                msg.set_tags("TagB")
            msg.set_body(f"{args.body_prefix}-{i}")
            if args.delay_every and i % args.delay_every == 0:
                msg.set_delay_time_level(1)
            if args.orderly_keys:
                result = producer.send_orderly(msg, i % args.orderly_keys)
            else:
                result = producer.send_sync(msg)
            print(
                json.dumps(
                    {
                        "i": i,
                        "status": int(result.status),
                        "msg_id": result.msg_id,
                        "offset": result.offset,
                    }
                ),
                flush=True,
            )
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
