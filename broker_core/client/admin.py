"""The admin calls of a broker client (``rmq.admin.v1.Admin``), held by
:class:`~broker_core.client.broker_client.BrokerClient` as its ``admin``.

Each method sends one JSON request and returns the response's ``result`` (plain dicts
and lists, as documented in ``broker_core/server/admin.py``); a non-OK status raises the
mapped ``broker_core.errors`` class. Every call here is idempotent, so transport
failures and busy answers are retried with the client's bounded backoff.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from broker_core.client.errors import error_for
from broker_core.errors import InvalidArgumentError, RocketMQError
from broker_core.protocol.durations import parse_backoff, parse_duration_ms
from broker_core.protocol.status import Code

ADMIN_SERVICE: Final = "rmq.admin.v1.Admin"


def encode_request(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(payload), separators=(",", ":")).encode("utf-8")


def decode_response(raw: bytes) -> Any:
    """The response's ``result``; the mapped error for a non-OK ``status``."""
    try:
        reply = json.loads(raw.decode("utf-8"))
        status = reply["status"]
        code, message = int(status["code"]), str(status["message"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise RocketMQError(f"malformed admin response: {exc}") from exc
    if code != Code.OK:
        raise error_for(code, message)
    return reply.get("result")


def backoff_spec(spec: str | Mapping[str, Any] | None) -> str | dict[str, Any] | None:
    """A retry backoff as the admin service takes it, checked before it is sent.

    ``"1s,5s,30s"`` (a list; the last repeats), ``"delay_level"``,
    ``"exponential:INITIAL,MULTIPLIER,MAX"`` (e.g. ``exponential:1s,2,1m``) or a backoff
    object (``RetryPolicy.to_dict()["backoff"]``). InvalidArgumentError otherwise.
    """
    if spec is None or spec == "delay_level":
        return spec
    if isinstance(spec, Mapping):
        return dict(spec)
    if not spec.startswith("exponential:"):
        parse_backoff(spec)  # raises with the same message the broker would give
        return spec
    parts = spec.removeprefix("exponential:").split(",")
    try:
        initial, multiplier, cap = parts
        factor = float(multiplier)
    except ValueError:
        raise InvalidArgumentError(
            f"exponential backoff is exponential:INITIAL,MULTIPLIER,MAX "
            f"(e.g. exponential:1s,2,1m), got {spec!r}"
        ) from None
    return {
        "type": "exponential",
        "initial_ms": parse_duration_ms(initial),
        "multiplier": factor,
        "max_ms": parse_duration_ms(cap),
    }


def reset_target(to: str | int) -> str | int:
    """``earliest``, ``latest``, epoch ms (int or digits) or ISO-8601 (naive = local time)."""
    if to in ("earliest", "latest") or isinstance(to, int):
        return to
    if to.isdigit():
        return int(to)
    try:
        moment = dt.datetime.fromisoformat(to)
    except ValueError:
        raise InvalidArgumentError(
            f"reset to earliest, latest, epoch ms or an ISO-8601 time "
            f"(2024-05-01T12:00:00Z), got {to!r}"
        ) from None
    return int(moment.timestamp() * 1000)


def _drop_none(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if v is not None}


AdminCall = Callable[[str, Mapping[str, Any]], Any]


class AdminCalls:
    """Admin methods over ``call(method, payload)``: one admin request (with retries)
    answering its ``result`` (``Transport.admin`` of the broker client holding this)."""

    def __init__(self, call: AdminCall) -> None:
        self._admin = call

    def health(self) -> dict[str, Any]:
        """Broker name, endpoint and commitlog offsets; raises if the broker is unreachable."""
        result: dict[str, Any] = self._admin("Health", {})
        return result

    def create_topic(
        self,
        name: str,
        *,
        queues: int | None = None,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int | None = None,
        message_type: str | None = None,
        attributes: Mapping[str, str] | None = None,
        update: bool = False,
        force: bool = False,
    ) -> dict[str, Any]:
        """Create ``name`` (or find it with the same settings); returns the topic's config
        with ``created``, ``changed``, ``hidden_messages`` and ``warnings``.

        An existing topic with other settings raises ConflictError unless ``update``;
        fewer read queues also need ``force`` (the answer's warnings say what it hid).
        """
        result: dict[str, Any] = self._admin(
            "CreateTopic",
            _drop_none(
                {
                    "name": name,
                    "queues": queues,
                    "read_queues": read_queues,
                    "write_queues": write_queues,
                    "perm": perm,
                    "message_type": message_type,
                    "attributes": dict(attributes) if attributes is not None else None,
                    "update": update or None,
                    "force": force or None,
                }
            ),
        )
        return result

    def list_topics(self, *, include_system: bool = False) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._admin("ListTopics", {"include_system": include_system})
        return result

    def topic_status(self, name: str) -> list[dict[str, Any]]:
        """Per read queue: ``queue_id``, ``min_offset``, ``max_offset``."""
        result: list[dict[str, Any]] = self._admin("TopicStatus", {"name": name})
        return result

    def delete_topic(self, name: str) -> None:
        self._admin("DeleteTopic", {"name": name})

    def create_group(
        self,
        name: str,
        *,
        max_retries: int | None = None,
        retry_backoff: str | Mapping[str, Any] | None = None,
        fifo: bool | None = None,
        consume_from_where: str | None = None,
        consume_timestamp_ms: int | None = None,
        broadcast: bool | None = None,
        consume_enable: bool | None = None,
        rebalance_strategy: str | None = None,
        update: bool = False,
    ) -> dict[str, Any]:
        """Create ``name`` (or find it with the same settings); with ``update``, change the
        settings given of an existing group (without it, other settings raise ConflictError).

        ``retry_backoff`` is a list of delays (``"1s,5s,30s"``; the last repeats),
        ``"delay_level"`` (RocketMQ's levels), ``"exponential:1s,2,1m"`` or a backoff
        object such as ``{"type": "exponential", "initial_ms": 1000, ...}``.
        """
        backoff = backoff_spec(retry_backoff)
        result: dict[str, Any] = self._admin(
            "CreateGroup",
            _drop_none(
                {
                    "name": name,
                    "max_retries": max_retries,
                    "retry_backoff": backoff,
                    "fifo": fifo,
                    "consume_from_where": consume_from_where,
                    "consume_timestamp_ms": consume_timestamp_ms,
                    "broadcast": broadcast,
                    "consume_enable": consume_enable,
                    "rebalance_strategy": rebalance_strategy,
                    "update": update or None,
                }
            ),
        )
        return result

    def list_groups(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._admin("ListGroups", {})
        return result

    def broker_config(self) -> dict[str, Any]:
        """``{"config": every broker setting now, "live_keys": keys that can change}``."""
        result: dict[str, Any] = self._admin("GetBrokerConfig", {})
        return result

    def update_broker_config(self, key: str, value: str | int | bool) -> dict[str, Any]:
        """Change a live key (InvalidArgumentError for others); ``{"key", "old", "new"}``."""
        result: dict[str, Any] = self._admin("UpdateBrokerConfig", {"key": key, "value": value})
        return result

    def delete_group(self, name: str) -> None:
        """Forget group ``name``'s config and offsets; GroupNotFoundError if unknown."""
        self._admin("DeleteGroup", {"name": name})

    def group_progress(self, name: str, topic: str | None = None) -> dict[str, Any]:
        """``{"group", "queues": [{topic, queue_id, broker_offset, consumer_offset, lag}],
        "total_lag", "inflight", "clients"}`` (POP deliveries not yet acked; the ids of the
        group's online consumers); GroupNotFoundError for an unknown group."""
        result: dict[str, Any] = self._admin(
            "GroupProgress", _drop_none({"name": name, "topic": topic})
        )
        return result

    def resend_message(self, message_id: str, topic: str, group: str) -> dict[str, Any]:
        """Store a copy of a message of ``topic`` for ``group``'s consumers only, as a new
        message (mqadmin consumeMessageDirectly): ``{"message_id", "topic", "offset"}``
        (the group's retry topic); MessageNotFoundError when this broker lacks it."""
        payload = {"message_id": message_id, "topic": topic, "group": group}
        result: dict[str, Any] = self._admin("ResendMessage", payload)
        return result

    def query_message(
        self,
        *,
        message_id: str | None = None,
        key: str | None = None,
        topic: str | None = None,
        max_results: int | None = None,
        text_bodies: bool = False,
    ) -> list[dict[str, Any]]:
        """Messages by id (MessageNotFoundError if none) or by key within ``topic``.

        Bodies are base64 (``body_encoding == "base64"``), or text when ``text_bodies``
        and they are valid UTF-8.
        """
        if (message_id is None) == (key is None):
            raise InvalidArgumentError("query_message needs exactly one of message_id and key")
        result: list[dict[str, Any]] = self._admin(
            "QueryMessage",
            _drop_none(
                {
                    "id": message_id,
                    "key": key,
                    "topic": topic,
                    "max_results": max_results,
                    "text_bodies": text_bodies or None,
                }
            ),
        )
        return result

    def lock_queues(
        self, group: str, topic: str, queue_ids: Iterable[int], *, client_id: str
    ) -> set[int]:
        """Lock queues of ``topic`` for ``client_id`` in ``group`` (orderly consumption);
        returns the ids it holds now: another client's live lock leaves a queue out."""
        result = self._admin(
            "LockQueues",
            {"group": group, "client_id": client_id, "topic": topic, "queue_ids": list(queue_ids)},
        )
        return {int(q) for q in result["locked"]}

    def unlock_queues(
        self, group: str, topic: str, queue_ids: Iterable[int], *, client_id: str
    ) -> set[int]:
        """Release the queues ``client_id`` holds among ``queue_ids``; returns them."""
        result = self._admin(
            "UnlockQueues",
            {"group": group, "client_id": client_id, "topic": topic, "queue_ids": list(queue_ids)},
        )
        return {int(q) for q in result["unlocked"]}

    def reset_offset(self, group: str, topic: str, to: str | int) -> dict[int, int]:
        """Move ``group`` in every queue of ``topic`` to ``"earliest"``, ``"latest"`` or the
        first message stored at or after ``to`` (epoch ms or ISO-8601, see
        :func:`reset_target`); returns {queue id: offset}."""
        rows = self._admin("ResetOffset", {"group": group, "topic": topic, "to": reset_target(to)})
        return {int(row["queue_id"]): int(row["offset"]) for row in rows}
