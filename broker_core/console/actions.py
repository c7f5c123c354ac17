"""What the console's write actions do, each by ordinary client calls.

* **Create / update a topic**: ``CreateTopic`` on every broker group (or the one named),
  with the same settings and so the same refusals as ``rmq topic create``.
* **Send a test message**: one ``SendMessage``, as ``rmq send``.
* **Reset a group's offsets**: ``ResetOffset`` on every broker group holding the topic.
* **Resend to a group**: a copy of the message (body, tag, keys, user properties) sent to
  the group's retry topic ``%RETRY%{group}``, which the group's consumers read beside
  their topics (POP), so the other groups of the topic do not get it again. Dead letters
  go back the same way. Limit: the broker reserves ``RETRY_TOPIC`` for itself, so the copy
  reaches the consumer under the retry topic's name, not its original topic's.
"""

from __future__ import annotations

from typing import Any, Final

from broker_core.client import RocketMQClient
from broker_core.console import messages
from broker_core.console.targets import Targets
from broker_core.errors import InvalidArgumentError, MessageNotFoundError, RocketMQError
from broker_core.protocol.group_topics import dlq_topic

TOPIC_SETTINGS: Final = frozenset(
    {"queues", "read_queues", "write_queues", "perm", "message_type", "update", "force"}
)


def topic_settings(form: dict[str, Any]) -> dict[str, Any]:
    """The CreateTopic settings in a request body (unknown fields are refused)."""
    unknown = set(form) - TOPIC_SETTINGS - {"name", "broker"}
    if unknown:
        raise InvalidArgumentError(f"unknown topic settings: {', '.join(sorted(unknown))}")
    settings: dict[str, Any] = {}
    for key in ("queues", "read_queues", "write_queues", "perm"):
        if form.get(key) not in (None, ""):
            try:
                settings[key] = int(form[key])
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"{key} must be a whole number") from None
    if form.get("message_type"):
        settings["message_type"] = str(form["message_type"]).upper()
    settings["update"] = bool(form.get("update"))
    settings["force"] = bool(form.get("force"))
    return settings


def create_topic(targets: Targets, name: str, form: dict[str, Any]) -> list[dict[str, Any]]:
    """Create or update ``name`` on each broker group (``form["broker"]``: that one only)."""
    settings = topic_settings(form)
    brokers = targets.brokers()
    only = form.get("broker") or None
    if only is not None and only not in brokers:
        raise InvalidArgumentError(f"no live broker group named {only!r}")
    done = []
    for broker, client in brokers.items():
        if only is None or broker == only:
            done.append(dict(client.create_topic(name, **settings), broker=broker))
    return done


def delete_topic(targets: Targets, name: str) -> list[str]:
    holding = targets.holding(name)
    for client in holding.values():
        client.delete_topic(name)
    return sorted(holding)


def send_test(client: RocketMQClient, topic: str, form: dict[str, Any]) -> dict[str, Any]:
    keys = [k.strip() for k in str(form.get("keys") or "").split(",") if k.strip()]
    receipt = client.send(
        topic, str(form.get("body") or ""), tag=form.get("tag") or None, keys=keys
    )
    return {"message_id": receipt.message_id, "offset": receipt.offset}


def reset_offset(targets: Targets, group: str, topic: str, to: str) -> list[dict[str, Any]]:
    done: list[dict[str, Any]] = []
    for broker, client in targets.holding(topic).items():
        moved = client.reset_offset(group, topic, to)
        done.extend({"broker": broker, "queue_id": q, "offset": o} for q, o in moved.items())
    return done


def _resend_copy(targets: Targets, group: str, message_id: str, topic: str) -> str:
    """The broker's ResendMessage on the broker group holding the message: a new message
    for ``group``'s consumers only, delivered as ``topic``'s (MessageNotFoundError from the
    last group when none holds it)."""
    error: RocketMQError | None = None
    for client in targets.holding(topic).values():
        try:
            return str(client.resend_message(message_id, topic, group)["message_id"])
        except MessageNotFoundError as exc:  # on another broker group
            error = exc
    assert error is not None  # holding() is never empty: it raises instead
    raise error


def resend(targets: Targets, group: str, message_id: str, topic: str) -> dict[str, Any]:
    """Resend one message (found by id in ``topic``) to ``group``."""
    return {"resent": [_resend_copy(targets, group, message_id, topic)]}


def resend_dlq(targets: Targets, group: str, limit: int = 1000) -> dict[str, Any]:
    """Resend every dead letter of ``group`` (up to ``limit``) back to the group."""
    dead = dlq_topic(group)
    rows = messages.browse(targets, dead, limit=limit)
    return {"resent": [_resend_copy(targets, group, m["message_id"], dead) for m in rows]}
