"""Our client's values to and from ``apache.rocketmq.v2`` protobuf messages.

Outgoing messages carry what the official client sends (message id, type, born time and
host, IDENTITY encoding) plus a CRC32 body digest, so the broker can reject a body
damaged on the way. Incoming messages have their digest verified (CRC32, MD5 or SHA1,
as the official client does) and gzip bodies inflated; a mismatch raises
CorruptionError rather than handing back bad bytes.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import socket
import zlib

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.client.model import QueueInfo, ReceivedMessage
from broker_core.errors import CorruptionError
from broker_core.pb_enums import DigestType, Encoding


def crc32_hex(body: bytes) -> str:
    """The body digest as the official clients write it: 8 upper-case hex digits."""
    return format(zlib.crc32(body) & 0xFFFFFFFF, "08X")


@functools.cache
def local_host() -> str:
    """This machine's address for ``born_host`` (loopback when it cannot be resolved)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _verify_digest(msg: pb.Message) -> None:
    props = msg.system_properties
    if not props.HasField("body_digest"):
        return
    kind, expected = props.body_digest.type, props.body_digest.checksum
    if kind == DigestType.CRC32:
        actual = crc32_hex(msg.body)
    elif kind == DigestType.MD5:
        actual = hashlib.md5(msg.body).hexdigest()
    elif kind == DigestType.SHA1:
        actual = hashlib.sha1(msg.body).hexdigest()
    else:
        return  # unspecified: nothing to check
    if actual.upper() != expected.upper():
        raise CorruptionError(
            f"message {props.message_id} of {msg.topic.name}: body digest {expected} "
            f"does not match the body ({actual})"
        )


def _body(msg: pb.Message) -> bytes:
    if msg.system_properties.body_encoding == Encoding.GZIP:
        try:
            return gzip.decompress(msg.body)
        except (OSError, EOFError, zlib.error) as exc:
            raise CorruptionError(
                f"message {msg.system_properties.message_id}: bad gzip body ({exc})"
            ) from exc
    return bytes(msg.body)


def _ms(props: pb.SystemProperties, name: str) -> int:
    return int(getattr(props, name).ToMilliseconds()) if props.HasField(name) else 0


def from_protobuf(msg: pb.Message) -> ReceivedMessage:
    """A received ``apache.rocketmq.v2.Message``; CorruptionError if its digest fails."""
    _verify_digest(msg)
    props = msg.system_properties
    return ReceivedMessage(
        message_id=props.message_id,
        topic=msg.topic.name,
        queue_id=props.queue_id,
        queue_offset=props.queue_offset,
        body=_body(msg),
        tag=props.tag if props.HasField("tag") else None,
        keys=tuple(props.keys),
        properties=dict(msg.user_properties),
        message_group=props.message_group if props.HasField("message_group") else None,
        born_timestamp_ms=_ms(props, "born_timestamp"),
        store_timestamp_ms=_ms(props, "store_timestamp"),
        delivery_timestamp_ms=(
            _ms(props, "delivery_timestamp") if props.HasField("delivery_timestamp") else None
        ),
        born_host=props.born_host,
        store_host=props.store_host,
        delivery_attempt=props.delivery_attempt,
        message_type=pb.MessageType.Name(props.message_type),
    )


def queue_from_protobuf(queue: pb.MessageQueue) -> QueueInfo:
    """A route entry; the endpoint is the broker's first advertised address."""
    addresses = queue.broker.endpoints.addresses
    endpoint = f"{addresses[0].host}:{addresses[0].port}" if addresses else ""
    return QueueInfo(
        topic=queue.topic.name,
        queue_id=queue.id,
        broker_name=queue.broker.name,
        endpoint=endpoint,
        permission=pb.Permission.Name(queue.permission),
        accept_message_types=tuple(pb.MessageType.Name(t) for t in queue.accept_message_types),
    )


def message_queue(topic: str, queue_id: int, broker_name: str = "") -> pb.MessageQueue:
    """The ``MessageQueue`` a pull or offset request names."""
    queue = pb.MessageQueue(id=queue_id)
    queue.topic.name = topic
    if broker_name:
        queue.broker.name = broker_name
    return queue
