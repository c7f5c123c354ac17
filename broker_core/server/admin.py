"""Placeholder: the admin service (replaced by its implementation)."""

from __future__ import annotations

from typing import Any

import grpc


def admin_handler(ctx: Any) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler("rmq.admin.v1.Admin", {})
