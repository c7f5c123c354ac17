"""Lite messages: ``Message.lite_topic`` names one of many lite topics under a LITE topic."""

from __future__ import annotations

from rocketmq import Producer

from examples.official_client._common import answer, args, config, message


def main(endpoint: str, parent: str, count: int) -> dict[str, list[str]]:
    producer = Producer(config(endpoint), (parent,))
    producer.startup()
    try:
        sent = []
        for i in range(count):
            msg = message(parent, f"lite-{i}", lite_topic=f"lite-test-{i}")
            sent.append(producer.send(msg).message_id)
        return {"sent": sent}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, parent, count = args("ENDPOINT PARENT_TOPIC COUNT")
    answer(main(endpoint, parent, int(count)))
