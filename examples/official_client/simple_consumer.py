"""A SimpleConsumer: ``subscribe``, ``receive`` a batch with an invisible time, ``ack``."""

from __future__ import annotations

import time
from typing import Any

from rocketmq import FilterExpression, SimpleConsumer

from examples.official_client._common import WAIT_S, answer, args, config, view


def main(endpoint: str, topic: str, group: str, count: int) -> dict[str, Any]:
    consumer = SimpleConsumer(config(endpoint), group, await_duration=2)
    consumer.startup()
    try:
        consumer.subscribe(topic, FilterExpression())
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.receive(32, 15):
                got.append(view(msg))
                consumer.ack(msg)
        return {"got": got}
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    endpoint, topic, group, count = args("ENDPOINT TOPIC GROUP COUNT")
    answer(main(endpoint, topic, group, int(count)))
