"""A LitePushConsumer bound to a LITE topic, subscribed to lite topics ``lite-test-0..N-1``."""

from __future__ import annotations

from typing import Any

from rocketmq import LitePushConsumer

from examples.official_client._common import WAIT_S, answer, args, config, wait_until
from examples.official_client.push_consumer import Collect


def main(endpoint: str, parent: str, group: str, count: int) -> dict[str, Any]:
    listener = Collect(count)
    consumer = LitePushConsumer(config(endpoint), group, parent, listener)
    consumer.startup()
    try:
        # startup does not wait for the server's settings, which carry the lite quota
        wait_until(consumer._init_settings_event.is_set)
        for i in range(count):
            consumer.subscribe_lite(f"lite-test-{i}")
        # subscribe_lite sends the name split into characters (a client bug); the full
        # set goes with subscribe_lite_all, which the client also runs every 30 s
        consumer.subscribe_lite_all()
        listener.enough.wait(WAIT_S)
        return {"got": list(listener.got)}
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    endpoint, parent, group, count = args("ENDPOINT PARENT_TOPIC GROUP COUNT")
    answer(main(endpoint, parent, group, int(count)))
