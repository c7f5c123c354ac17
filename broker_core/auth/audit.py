"""The audit log: one line on logger ``rmq.audit`` for every admin change.

Each line says what was asked (the admin method and its fields, secrets masked), who
asked (the authenticated access key, or ``anonymous`` when authentication is off),
from where (the gRPC peer) and how it ended (``ok`` or the refusal's code and message).
In ``--log-format json`` the same facts are fields: ``audit`` (= true), ``action``,
``user``, ``peer``, ``args``, ``outcome``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any, Final

log = logging.getLogger("rmq.audit")

SECRET_FIELDS: Final = frozenset({"secret_key", "secretKey", "password"})
ANONYMOUS: Final = "anonymous"

_current = threading.local()


def set_caller(user: str | None, peer: str) -> None:
    """Who makes the call this thread runs (set by the auth wrapper before the handler)."""
    _current.user = user
    _current.peer = peer


def caller() -> tuple[str, str]:
    """(user, peer) of the call this thread runs; ``anonymous`` when nobody signed."""
    return getattr(_current, "user", None) or ANONYMOUS, getattr(_current, "peer", "")


def masked(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ("***" if k in SECRET_FIELDS else v) for k, v in args.items()}


def record(action: str, args: Mapping[str, Any], outcome: str, *, peer: str = "") -> None:
    """Log one admin change (``outcome``: ``ok`` or why it was refused)."""
    user, thread_peer = caller()
    peer = peer or thread_peer
    shown = masked(args)
    log.info(
        "audit %s by %s from %s: %s -> %s",
        action,
        user,
        peer or "?",
        json.dumps(shown, sort_keys=True, default=str),
        outcome,
        extra={
            "fields": {
                "audit": True,
                "action": action,
                "user": user,
                "peer": peer,
                "args": shown,
                "outcome": outcome,
            }
        },
    )
