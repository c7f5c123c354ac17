"""What the scenario scripts share: the client configuration, messages, the JSON answer."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from rocketmq import ClientConfiguration, Credentials, Message

WAIT_S = 20  # how long a consumer script waits for what it expects


def config(endpoint: str) -> ClientConfiguration:
    """No credentials, no namespace: what the examples use without auth."""
    return ClientConfiguration(endpoint, Credentials())


def message(
    topic: str, body: str, *, tag: str | None = None, keys: str | None = None, **fields: Any
) -> Message:
    """A message with ``fields`` set through the client's own setters."""
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    if tag:
        msg.tag = tag
    if keys:
        msg.keys = keys
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def wait_until(done: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    """Poll ``done`` every 50 ms until it is true or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def view(msg: Any) -> dict[str, Any]:
    """The fields of a received message a test checks."""
    return {
        "id": msg.message_id,
        "body": msg.body.decode(),
        "tag": msg.tag,
        "group": msg.message_group,
        "lite_topic": msg.lite_topic,
        "priority": msg.priority,
        "received_at_s": time.time(),
    }


def answer(result: dict[str, Any]) -> None:
    """Print the script's one JSON line."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def args(names: str) -> list[str]:
    """The command-line arguments, or a usage error naming them."""
    wanted = names.split()
    if len(sys.argv) - 1 != len(wanted):
        sys.exit(f"usage: python -m {sys.modules['__main__'].__spec__.name} {names}")  # type: ignore[union-attr]
    return sys.argv[1:]
