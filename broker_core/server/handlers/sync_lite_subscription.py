"""``SyncLiteSubscription``: a lite consumer says which lite topics of its bound topic it wants.

Request → ``Broker.sync_lite_subscription(group, client id, topic, action, lite_topic_set)``
(policy in ``broker_core.broker.lite``). The client is named by the ``x-mq-client-id``
header (BAD_REQUEST without it). Answers OK; BAD_REQUEST when the topic is not a LITE
topic, TOPIC_NOT_FOUND when it does not exist, ILLEGAL_LITE_TOPIC for a bad lite topic
name, LITE_SUBSCRIPTION_QUOTA_EXCEEDED past the quota (the client's set is unchanged
then). ``version`` and ``offset_option`` are accepted and ignored: a lite topic new to a
group is read from its first message.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import ok
from broker_core.server import sessions
from broker_core.server.context import ServerContext


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Apply the subscription change; see the module docstring for the statuses."""
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.topic.name)
    ctx.broker.sync_lite_subscription(
        group, sessions.client_id_of(context), topic, request.action, list(request.lite_topic_set)
    )
    return service_pb2.SyncLiteSubscriptionResponse(status=ok())
