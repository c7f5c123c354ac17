"""Placeholder: replaced by the handler's implementation."""

from __future__ import annotations

from typing import Any

from broker_core.errors import UnsupportedError


def update_offset(ctx: Any, request: Any, context: Any) -> Any:
    raise UnsupportedError("UpdateOffset is not implemented yet")


def get_offset(ctx: Any, request: Any, context: Any) -> Any:
    raise UnsupportedError("GetOffset is not implemented yet")


def query_offset(ctx: Any, request: Any, context: Any) -> Any:
    raise UnsupportedError("QueryOffset is not implemented yet")
