"""The write side of the routes: (method, path, function of the request's JSON body).
Each is one action of :mod:`broker_core.console.actions`; the pages call them from the
browser with the session's CSRF token."""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request

from broker_core.console import actions
from broker_core.console.targets import Targets
from broker_core.errors import InvalidArgumentError


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"give {key!r}")
    return value.strip()


def create_topic(request: Request, t: Targets, body: dict[str, Any]) -> dict[str, Any]:
    name = _text(body, "name")
    return {"topic": name, "results": actions.create_topic(t, name, body)}


def delete_topic(request: Request, t: Targets, body: dict[str, Any]) -> dict[str, Any]:
    name = request.path_params["topic"]
    return {"topic": name, "deleted_on": actions.delete_topic(t, name)}


def send_test(request: Request, t: Targets, body: dict[str, Any]) -> dict[str, Any]:
    return actions.send_test(t.client, request.path_params["topic"], body)


def reset(request: Request, t: Targets, body: dict[str, Any]) -> dict[str, Any]:
    group = request.path_params["group"]
    topic, to = _text(body, "topic"), _text(body, "to")
    return {"group": group, "topic": topic, "queues": actions.reset_offset(t, group, topic, to)}


def resend(request: Request, t: Targets, body: dict[str, Any]) -> dict[str, Any]:
    return actions.resend(
        t, _text(body, "group"), request.path_params["msg_id"], _text(body, "topic")
    )


def resend_dlq(request: Request, t: Targets, body: dict[str, Any]) -> dict[str, Any]:
    group = request.path_params["group"]
    one = body.get("message_id")
    if one:
        return actions.resend(t, group, str(one), actions.dlq_topic(group))
    return actions.resend_dlq(t, group)


WRITES: Final = (
    ("POST", "/topics", create_topic),
    ("DELETE", "/topics/{topic}", delete_topic),
    ("POST", "/topics/{topic}/messages", send_test),
    ("POST", "/groups/{group}/reset", reset),
    ("POST", "/messages/{msg_id}/resend", resend),
    ("POST", "/dlq/{group}/resend", resend_dlq),
)
