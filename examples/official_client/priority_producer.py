"""Priority messages: ``Message.priority`` 0..COUNT-1 (a higher priority is read first)."""

from __future__ import annotations

from rocketmq import Producer

from examples.official_client._common import answer, args, config, message


def main(endpoint: str, topic: str, count: int) -> dict[str, list[str]]:
    producer = Producer(config(endpoint), (topic,))
    producer.startup()
    try:
        sent = []
        for priority in range(count):
            msg = message(topic, f"priority-{priority}", tag="priority", priority=priority)
            sent.append(producer.send(msg).message_id)
        return {"sent": sent}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, topic, count = args("ENDPOINT TOPIC COUNT")
    answer(main(endpoint, topic, int(count)))
