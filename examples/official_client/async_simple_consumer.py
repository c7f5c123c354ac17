"""A SimpleConsumer used asynchronously: ``receive_async`` futures, acks on a thread pool."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rocketmq import FilterExpression, SimpleConsumer

from examples.official_client._common import WAIT_S, answer, args, config, view, wait_until


def main(endpoint: str, topic: str, group: str, count: int) -> dict[str, Any]:
    consumer = SimpleConsumer(
        config(endpoint), group, {topic: FilterExpression()}, await_duration=2
    )
    consumer.startup()
    acked: list[dict[str, Any]] = []
    lock = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ack")

    def ack(msg: Any) -> None:
        consumer.ack(msg)
        with lock:
            acked.append(view(msg))

    def on_received(future: Future[Any]) -> None:
        for msg in future.result():
            pool.submit(ack, msg)

    try:
        deadline = time.monotonic() + WAIT_S
        while len(acked) < count and time.monotonic() < deadline:
            future = consumer.receive_async(32, 15)
            future.add_done_callback(on_received)
            wait_until(future.done)
            wait_until(lambda: len(acked) >= count, 0.2)
        pool.shutdown(wait=True)
        return {"got": acked}
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    endpoint, topic, group, count = args("ENDPOINT TOPIC GROUP COUNT")
    answer(main(endpoint, topic, group, int(count)))
