"""SendMessage's fast lane: a request of plain messages straight to a batch of columns.

Most requests are batches of ordinary messages: one topic, NORMAL type, an IDENTITY body
with a CRC32 digest, a message id, maybe a tag, keys and user properties. For those,
:func:`to_columns` builds the broker's :class:`~broker_core.broker.batch.PlainBatch` in
one pass, without a ``Message`` object per message, and the broker stores it with numpy.

It never decides that a message is bad. Every check here is a sufficient condition for
what ``convert_in.to_messages`` accepts; when anything is unusual (another message type,
a delay or a group, gzip, an MD5 or mismatched digest, a blank or oversize field, a
reserved character or key, several topics or born hosts) it returns None and the request
takes the general path, which accepts it or fails it with the precise error. So both
lanes store exactly the same bytes (tests compare them) and refuse exactly the same
requests.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from broker_core.broker.batch import PlainBatch
from broker_core.errors import RocketMQError
from broker_core.message import tag_hash, validate_topic_name
from broker_core.pb_enums import DigestType, Encoding, MessageType
from broker_core.protocol.message_rules import (
    MAX_MESSAGE_ID_CHARS,
    Limits,
    born_host,
    has_reserved,
    plain,
    plain_key,
    plain_tag,
    plain_user_key,
)
from broker_core.protocol.property_codec import encode_send
from broker_core.server.convert_in import timestamp_ms

if TYPE_CHECKING:  # annotations only (the generated classes carry no types)
    from rocketmq.grpc_protocol import definition_pb2 as pb

_PLAIN_TYPES: Final = (MessageType.NORMAL, MessageType.MESSAGE_TYPE_UNSPECIFIED)
_PLAIN_BODY: Final = (Encoding.IDENTITY, Encoding.ENCODING_UNSPECIFIED)


def to_columns(
    protos: Sequence[pb.Message], *, limits: Limits, peer: tuple[str, int], now_ms: int
) -> PlainBatch | None:
    """The request's messages as one batch, or None to take the general path."""
    if not protos:
        return None
    topic = protos[0].topic.name
    claimed_host = protos[0].system_properties.born_host
    max_body = limits.max_body_bytes
    texts: list[str] = []  # every string a producer chose, checked for reserved chars at once
    bodies, properties, crcs, tags_codes, born, index_keys = [], [], [], [], [], []
    born_of: dict[tuple[int, int], int] = {}
    for proto in protos:
        sp = proto.system_properties
        # HasField costs as much as five attribute reads: it is asked only where a
        # field's value cannot tell (an empty string or zero may still be "set").
        if (
            proto.topic.name != topic
            or sp.message_type not in _PLAIN_TYPES
            or sp.body_encoding not in _PLAIN_BODY
            or sp.born_host != claimed_host
            or sp.message_group
            or sp.HasField("message_group")
            or sp.HasField("delivery_timestamp")
        ):
            return None
        body = proto.body
        crc = zlib.crc32(body)
        if not 0 < len(body) <= max_body:
            return None
        digest = sp.body_digest
        checksum = digest.checksum
        if (checksum or sp.HasField("body_digest")) and (
            digest.type != DigestType.CRC32 or checksum != f"{crc:08X}"
        ):
            return None
        message_id = sp.message_id
        if not plain(message_id, MAX_MESSAGE_ID_CHARS):
            return None
        texts.append(message_id)
        keys = [message_id]
        tag = sp.tag or None
        if tag is not None:
            if not plain_tag(tag):
                return None
            texts.append(tag)
        elif sp.HasField("tag"):
            return None  # an empty tag: refused by the general path
        extra_keys = list(sp.keys) if sp.keys else None
        if extra_keys:
            for key in extra_keys:
                if not plain_key(key):
                    return None
            texts.extend(extra_keys)
            keys.extend(extra_keys)
        user = proto.user_properties
        if user:
            for name, value in user.items():
                if not plain_user_key(name):
                    return None
                texts += (name, value)
        ts = sp.born_timestamp  # unset reads as zero, which means "now" as well
        at = (ts.seconds, ts.nanos)
        if at not in born_of:
            if at[0] < 0 or at[1] < 0:
                return None
            born_of[at] = timestamp_ms(ts) or now_ms
        born.append(born_of[at])
        bodies.append(body)
        properties.append(encode_send(message_id, tag, extra_keys, user))
        crcs.append(crc)
        tags_codes.append(tag_hash(tag))
        index_keys.append(keys)
    if has_reserved("".join(texts)):
        return None
    if max(map(len, properties)) > limits.properties_cap:
        return None
    try:
        validate_topic_name(topic)
    except RocketMQError:
        return None  # the general path names the problem
    return PlainBatch(
        topic,
        bodies,
        properties,
        body_crcs=crcs,
        tags_codes=tags_codes,
        born_ms=born,
        born_host=(born_host(claimed_host, peer[0]), peer[1]),
        index_keys=index_keys,
        max_body_bytes=max_body,
        max_properties_bytes=limits.max_properties_bytes,
    )
