"""The read side of the routes: path → the function giving the page's (and the API's)
dict from the request. Pages render it (``templates/``); ``/api`` + path returns it."""

from __future__ import annotations

import time
from typing import Any, Final

from starlette.requests import Request

from broker_core.client.admin import reset_target
from broker_core.console import messages, views
from broker_core.console.targets import Targets
from broker_core.console.views import ConsumeRates
from broker_core.errors import InvalidArgumentError
from broker_core.protocol.group_topics import dlq_topic


def overview(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    return views.overview(t, rates)


def topics(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    return views.topics(t, include_system=request.query_params.get("all") == "1")


def topic(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    return views.topic(t, request.path_params["topic"])


def groups(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    return views.groups(t)


def group(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    return views.group(t, request.path_params["group"])


def _time_ms(text: str | None, what: str) -> int | None:
    if not text:
        return None
    target = reset_target(text)
    if not isinstance(target, int):
        raise InvalidArgumentError(f"{what} must be a time, got {text!r}")
    return target


def search(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    """By ``msg_id`` (``topic`` optional), by ``topic`` and ``key``, or by ``topic`` and
    ``begin``/``end`` (epoch ms or ISO-8601; ``end`` defaults to now)."""
    q = request.query_params
    topic_name, key, msg_id = q.get("topic") or None, q.get("key"), q.get("msg_id")
    begin, end = _time_ms(q.get("begin"), "begin"), _time_ms(q.get("end"), "end")
    found: list[dict[str, Any]] | None = None
    if msg_id:
        found = messages.by_id(t, msg_id, topic_name)
    elif key or begin is not None or end is not None:
        if topic_name is None:
            raise InvalidArgumentError("a search by key or time needs a topic")
        if key:
            found = messages.by_key(t, topic_name, key)
        else:
            stop = end if end is not None else int(time.time() * 1000) + 1
            found = messages.by_time(t, topic_name, begin or 0, stop)
    return {"messages": found}


def message(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    msg_id = request.path_params["msg_id"]
    topic_name = request.query_params.get("topic") or None
    found = messages.by_id(t, msg_id, topic_name)[0]
    group_names = [g["name"] for g in views.groups(t)["groups"]]
    return {
        "message": found,
        "trace": messages.trace(t.client, msg_id, found["topic"]),
        "groups": group_names,
    }


def dlq(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    data = views.dlq(t)
    browse_group = request.query_params.get("group")
    if browse_group:
        data["browse"] = {"group": browse_group, **dlq_group(request, t, rates, browse_group)}
    return data


def dlq_group(
    request: Request, t: Targets, rates: ConsumeRates, name: str | None = None
) -> dict[str, Any]:
    group_name = name or request.path_params["group"]
    return {"messages": messages.browse(t, dlq_topic(group_name))}


def acl(request: Request, t: Targets, rates: ConsumeRates) -> dict[str, Any]:
    return views.acl(t.client)


PAGES: Final = (
    ("/", "overview.html", overview),
    ("/topics", "topics.html", topics),
    ("/topics/{topic}", "topic.html", topic),
    ("/groups", "groups.html", groups),
    ("/groups/{group}", "group.html", group),
    ("/messages", "messages.html", search),
    ("/messages/{msg_id}", "message.html", message),
    ("/dlq", "dlq.html", dlq),
    ("/acl", "acl.html", acl),
)
API: Final = (
    ("/overview", overview),
    ("/topics", topics),
    ("/topics/{topic}", topic),
    ("/groups", groups),
    ("/groups/{group}", group),
    ("/messages", search),
    ("/messages/{msg_id}", message),
    ("/dlq", dlq),
    ("/dlq/{group}", dlq_group),
    ("/acl", acl),
)
