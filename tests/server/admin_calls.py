"""Admin queries of the producer tests (``test_producer*.py``): what a running broker
process stored, read through its admin service (QueryMessage by id, TopicStatus)."""

from __future__ import annotations

import json
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

Code = pb.Code
TIMEOUT_S = 10


def admin_call(endpoint: str, method: str, **fields: Any) -> dict[str, Any]:
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            f"/rmq.admin.v1.Admin/{method}",
            request_serializer=lambda raw: raw,
            response_deserializer=json.loads,
        )
        return call(json.dumps(fields).encode(), timeout=TIMEOUT_S)  # type: ignore[no-any-return]


def stored(endpoint: str, message_id: str, topic: str) -> dict[str, Any] | None:
    """The newest message with this id stored in ``topic`` itself (admin QueryMessage), or
    None (held copies in the timer or half topic name ``topic`` too, and do not count)."""
    reply = admin_call(endpoint, "QueryMessage", id=message_id, topic=topic, text_bodies=True)
    if reply["status"]["code"] == Code.MESSAGE_NOT_FOUND:
        return None
    assert reply["status"]["code"] == Code.OK, reply
    newest = reply["result"][0]
    return newest if newest["topic"] == topic else None  # type: ignore[no-any-return]


def topic_total(endpoint: str, topic: str) -> int:
    reply = admin_call(endpoint, "TopicStatus", name=topic)
    assert reply["status"]["code"] == Code.OK, reply
    return sum(q["max_offset"] for q in reply["result"])
