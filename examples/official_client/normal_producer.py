"""Normal messages: ``Producer.send`` with a tag, keys and a user property."""

from __future__ import annotations

from rocketmq import Producer

from examples.official_client._common import answer, args, config, message


def main(endpoint: str, topic: str, count: int) -> dict[str, list[str]]:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        sent = []
        for i in range(count):
            msg = message(topic, f"normal-{i}", tag="normal", keys=f"key-{i}")
            msg.add_property("scenario", "normal")
            sent.append(producer.send(msg).message_id)
        return {"sent": sent}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, topic, count = args("ENDPOINT TOPIC COUNT")
    answer(main(endpoint, topic, int(count)))
