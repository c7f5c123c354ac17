"""FIFO messages: ``Message.message_group`` keeps each group's order."""

from __future__ import annotations

from rocketmq import Producer

from examples.official_client._common import answer, args, config, message


def main(endpoint: str, topic: str, count: int) -> dict[str, list[str]]:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        sent = []
        for i in range(count):
            group = f"group-{i % 2}"
            msg = message(topic, f"{group}:{i}", tag="fifo", message_group=group)
            sent.append(producer.send(msg).message_id)
        return {"sent": sent}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, topic, count = args("ENDPOINT TOPIC COUNT")
    answer(main(endpoint, topic, int(count)))
