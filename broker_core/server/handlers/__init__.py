"""One module per RPC of MessagingService (see ``broker_core.server.service``)."""

from broker_core.server.handlers import (
    ack_message,
    change_invisible_duration,
    end_transaction,
    forward_to_dlq,
    heartbeat,
    notify_client_termination,
    offsets,
    pull_message,
    query_assignment,
    query_route,
    recall_message,
    receive_message,
    send_message,
    sync_lite_subscription,
    telemetry,
)

__all__ = [
    "ack_message",
    "change_invisible_duration",
    "end_transaction",
    "forward_to_dlq",
    "heartbeat",
    "notify_client_termination",
    "offsets",
    "pull_message",
    "query_assignment",
    "query_route",
    "recall_message",
    "receive_message",
    "send_message",
    "sync_lite_subscription",
    "telemetry",
]
