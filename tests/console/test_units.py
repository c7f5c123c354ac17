"""The console's pure parts: how bodies are shown, what a topic form may say, where a login
may lead, and the error → HTTP status table. No network."""

from __future__ import annotations

import pytest

from broker_core.console.actions import topic_settings
from broker_core.console.app import _local_path, http_status
from broker_core.console.messages import render_body
from broker_core.errors import (
    AccessDeniedError,
    ConflictError,
    InvalidArgumentError,
    RocketMQError,
    TopicNotFoundError,
    UnauthorizedError,
)


@pytest.mark.parametrize(
    ("body", "shown", "text"),
    [
        (b'{"a":1}', "json", '{\n  "a": 1\n}'),
        (b"plain words", "text", "plain words"),
        ("héllo".encode(), "text", "héllo"),
        (b"\xff\x00\x01", "hex", "ff 00 01"),
        (b"", "text", ""),
    ],
)
def test_bodies_show_as_json_text_or_hex(body: bytes, shown: str, text: str) -> None:
    assert render_body(body) == {"format": shown, "text": text, "bytes": len(body)}


def test_topic_form_fields_become_create_topic_settings() -> None:
    form = {"name": "t", "queues": "4", "perm": "6", "message_type": "fifo", "update": "1"}
    assert topic_settings(form) == {
        "queues": 4,
        "perm": 6,
        "message_type": "FIFO",
        "update": True,
        "force": False,
    }


@pytest.mark.parametrize(
    ("form", "complaint"),
    [({"queues": "four"}, "whole number"), ({"colour": "red"}, "unknown topic settings")],
)
def test_a_bad_topic_form_is_refused(form: dict[str, str], complaint: str) -> None:
    with pytest.raises(InvalidArgumentError, match=complaint):
        topic_settings(form)


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        ("/topics", True),
        ("/", True),
        ("//evil.example", False),
        ("https://x", False),
        ("/\\evil", False),
        ("topics", False),
    ],
)
def test_a_login_leads_only_to_this_site(target: str, allowed: bool) -> None:
    assert _local_path(target) is allowed


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (UnauthorizedError("x"), 401),
        (AccessDeniedError("x"), 403),
        (TopicNotFoundError("x"), 404),
        (ConflictError("x"), 409),
        (InvalidArgumentError("x"), 400),
        (RocketMQError("x"), 502),
    ],
)
def test_errors_map_to_http_statuses(error: RocketMQError, status: int) -> None:
    assert http_status(error) == status
