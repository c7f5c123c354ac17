"""Our thin synchronous client: batch send, offset pull, offsets and admin calls.

>>> from broker_core.client import RocketMQClient
>>> client = RocketMQClient("127.0.0.1:8081")  # nothing connects until the first call
>>> client.endpoint
'127.0.0.1:8081'
>>> client.close()
"""

from broker_core.client.broker_client import BrokerClient
from broker_core.client.client import RocketMQClient, parse_endpoint
from broker_core.client.cluster import ClusterClient
from broker_core.client.errors import BrokerUnavailableError
from broker_core.client.model import (
    OutgoingMessage,
    PullBatch,
    QueueInfo,
    ReceivedMessage,
    SendReceipt,
)
from broker_core.client.orderly import OrderlyPuller

__all__ = [
    "BrokerClient",
    "BrokerUnavailableError",
    "ClusterClient",
    "OrderlyPuller",
    "OutgoingMessage",
    "PullBatch",
    "QueueInfo",
    "ReceivedMessage",
    "RocketMQClient",
    "SendReceipt",
    "parse_endpoint",
]
