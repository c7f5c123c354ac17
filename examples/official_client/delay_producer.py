"""A delayed message: ``Message.delivery_timestamp`` (seconds since the epoch)."""

from __future__ import annotations

import time
from typing import Any

from rocketmq import Producer

from examples.official_client._common import answer, args, config, message


def main(endpoint: str, topic: str, delay_s: int) -> dict[str, Any]:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        deliver_at_s = int(time.time()) + delay_s
        msg = message(topic, "delayed", tag="delay", delivery_timestamp=deliver_at_s)
        return {"sent": producer.send(msg).message_id, "deliver_at_s": deliver_at_s}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, topic, delay_s = args("ENDPOINT TOPIC DELAY_S")
    answer(main(endpoint, topic, int(delay_s)))
