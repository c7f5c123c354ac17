"""A PushConsumer: a ``MessageListener`` returning SUCCESS for each message."""

from __future__ import annotations

import threading
from typing import Any

from rocketmq import ConsumeResult, FilterExpression, Message, MessageListener, PushConsumer

from examples.official_client._common import WAIT_S, answer, args, config, view


class Collect(MessageListener):
    """Keeps what it consumed; ``enough`` is set once ``count`` arrived."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.got: list[dict[str, Any]] = []
        self.enough = threading.Event()
        self._lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        with self._lock:
            self.got.append(view(message))
            if len(self.got) >= self.count:
                self.enough.set()
        return ConsumeResult.SUCCESS


def main(endpoint: str, topic: str, group: str, count: int) -> dict[str, Any]:
    listener = Collect(count)
    consumer = PushConsumer(config(endpoint), group, listener, {topic: FilterExpression()})
    consumer.startup()
    try:
        listener.enough.wait(WAIT_S)
        return {"got": list(listener.got)}
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    endpoint, topic, group, count = args("ENDPOINT TOPIC GROUP COUNT")
    answer(main(endpoint, topic, group, int(count)))
