"""``apache.rocketmq.v2`` enum values as plain attributes, for the per-message paths.

Protobuf's enum wrappers resolve every attribute (``pb.DigestType.CRC32``) through a
Python ``__getattr__``, and ``values()`` builds a list each call; converting a batch of
256 messages did that a dozen times per message. These namespaces hold the same ints.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Final

from rocketmq.grpc_protocol import definition_pb2 as pb


def _plain(enum: Any) -> SimpleNamespace:
    return SimpleNamespace(**dict(enum.items()))


MessageType: Final = _plain(pb.MessageType)
DigestType: Final = _plain(pb.DigestType)
Encoding: Final = _plain(pb.Encoding)
MESSAGE_TYPE_NAMES: Final = {int(v): k for k, v in pb.MessageType.items()}
DIGEST_TYPE_NAMES: Final = {int(v): k for k, v in pb.DigestType.items()}
