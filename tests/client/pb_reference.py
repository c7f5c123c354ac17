"""Reference builder of ``apache.rocketmq.v2.Message`` objects (test-only).

Production sends are written as bytes by ``broker_core.client.wire``; these builders make
the protobuf objects the same input must parse to, one field at a time, so tests can
compare the two (``tests/client/test_wire.py``) and build requests by hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.client.convert import crc32_hex, local_host
from broker_core.client.model import OutgoingMessage
from broker_core.errors import InvalidArgumentError
from broker_core.message import new_message_id, validate_topic_name
from broker_core.pb_enums import DigestType, Encoding, MessageType


def message_type_of(msg: OutgoingMessage) -> int:
    """NORMAL, FIFO (has a message group) or DELAY (has a delivery time); not both."""
    if msg.message_group and msg.delivery_timestamp_ms is not None:
        raise InvalidArgumentError("a message cannot have both a message group and a delivery time")
    if msg.message_group:
        return int(MessageType.FIFO)
    if msg.delivery_timestamp_ms is not None:
        return int(MessageType.DELAY)
    return int(MessageType.NORMAL)


def to_protobuf(topic: str, msg: OutgoingMessage, *, namespace: str = "") -> Any:
    """Build one ``apache.rocketmq.v2.Message`` with a fresh message id.

    Raises InvalidArgumentError for an empty body or an illegal topic name (before any
    network call, so a bad batch costs nothing).
    """
    return batch_to_protobuf(topic, [msg], namespace=namespace)[0]


def batch_to_protobuf(
    topic: str, messages: Iterable[OutgoingMessage], *, namespace: str = ""
) -> list[Any]:
    """:func:`to_protobuf` for many messages to one topic (checked and stamped once).

    Each message is built by one constructor call: setting protobuf fields one by one
    costs a Python round trip each, and a batch of 256 paid that a dozen times per message.
    """
    validate_topic_name(topic)
    resource = pb.Resource(name=topic, resource_namespace=namespace)
    born = Timestamp()
    born.FromMilliseconds(time.time_ns() // 1_000_000)
    host = local_host()
    out = []
    for msg in messages:
        body = bytes(msg.body)
        if not body:
            raise InvalidArgumentError("message body is empty")
        props = pb.SystemProperties(
            tag=msg.tag or None,
            keys=msg.keys,
            message_id=new_message_id(),
            message_type=message_type_of(msg),
            body_digest=pb.Digest(type=DigestType.CRC32, checksum=crc32_hex(body)),
            body_encoding=Encoding.IDENTITY,
            born_timestamp=born,
            born_host=host,
            message_group=msg.message_group or None,
        )
        if msg.delivery_timestamp_ms is not None:
            props.delivery_timestamp.FromMilliseconds(msg.delivery_timestamp_ms)
        out.append(
            pb.Message(
                topic=resource,
                user_properties=msg.properties or None,
                system_properties=props,
                body=body,
            )
        )
    return out
