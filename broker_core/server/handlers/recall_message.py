"""Placeholder: replaced by the handler's implementation."""

from __future__ import annotations

from typing import Any

from broker_core.errors import UnsupportedError


def handle(ctx: Any, request: Any, context: Any) -> Any:
    raise UnsupportedError("recall_message is not implemented yet")
