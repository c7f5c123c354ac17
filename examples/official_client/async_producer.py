"""Asynchronous sends: ``Producer.send_async`` futures with done callbacks."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from rocketmq import Producer

from examples.official_client._common import answer, args, config, message, wait_until


def main(endpoint: str, topic: str, count: int) -> dict[str, Any]:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    sent: list[str] = []
    failed: list[str] = []
    lock = threading.Lock()

    def on_done(future: Future[Any]) -> None:
        with lock:
            try:
                sent.append(future.result().message_id)
            except Exception as exc:  # the example reports failures from the callback
                failed.append(str(exc))

    try:
        for i in range(count):
            future = producer.send_async(message(topic, f"async-{i}", tag="async"))
            future.add_done_callback(on_done)
        wait_until(lambda: len(sent) + len(failed) >= count)
        return {"sent": sent, "failed": failed}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, topic, count = args("ENDPOINT TOPIC COUNT")
    answer(main(endpoint, topic, int(count)))
