"""Transactional messages: ``begin_transaction``, then commit, roll back, or leave the
outcome to the broker's check-back answered by a ``TransactionChecker``."""

from __future__ import annotations

import threading
from typing import Any

from rocketmq import Message, Producer, TransactionChecker, TransactionResolution

from examples.official_client._common import WAIT_S, answer, args, config, message


class CommitOnCheck(TransactionChecker):
    """Commits every message the broker asks about; records that it was asked."""

    def __init__(self) -> None:
        self.checked: list[str] = []
        self.asked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.message_id)
        self.asked.set()
        return TransactionResolution.COMMIT


def main(endpoint: str, topic: str, outcome: str) -> dict[str, Any]:
    """``outcome`` is ``commit``, ``rollback`` or ``check`` (commit when the broker asks)."""
    checker = CommitOnCheck()
    producer = Producer(config(endpoint), (topic,), checker=checker)
    producer.startup()
    try:
        transaction = producer.begin_transaction()
        msg = message(topic, f"tx-{outcome}", tag="transaction", keys=f"tx-{outcome}")
        msg.add_property("outcome", outcome)
        receipt = producer.send(msg, transaction)
        if outcome == "commit":
            transaction.commit()
        elif outcome == "rollback":
            transaction.rollback()
        else:
            checker.asked.wait(WAIT_S)
        return {"sent": receipt.message_id, "checked": checker.checked}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    endpoint, topic, outcome = args("ENDPOINT TOPIC OUTCOME")
    answer(main(endpoint, topic, outcome))
