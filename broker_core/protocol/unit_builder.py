"""Building plain message units as arrays: the one builder of the broker and the client.

A plain unit (:mod:`broker_core.protocol.unit` draws its bytes) is a header, the body and
a tail: the topic's length byte and bytes, the properties' length and the properties
(:mod:`broker_core.protocol.property_codec`). Both builders of many plain units at once
fill the headers as one array of :data:`~broker_core.protocol.unit.HEADER_DTYPE` records
and the tails as bytes with these functions: the broker's (``store.columns``, for
SendMessage's and the 4.x batch's plain messages) and our producer's (SendBulk,
:mod:`broker_core.protocol.bulk_units`). So every way in lays out the same bytes.

What is left zero here is filled by whoever knows it: the unit CRC (the client computes
it with the broker's fields zero, the broker's packer once they are filled), the born
host (the broker), the open fields of the append (queue id and offset, physical offset,
store time and host), and flag, sys_flag, reconsume times and prepared-transaction
offset (a plain message has none).

>>> tails = plain_tails(unit.topic_head("t"), [b"UNIQ_KEY\\x01A\\x02"])
>>> sizes = unit_sizes(np.array([2]), len(tails[0]))
>>> head = plain_head(sizes, np.array([2]), [7], born_ms=5, tags_codes=[0])
>>> sizes.tolist(), head["total_size"].tolist(), head["body_crc"].tolist(), tails[0][:2]
([117], [117], [7], b'\\x01t')
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Sequence
from typing import Final

import numpy as np

from broker_core.protocol import unit

ZERO_IP: Final = b"\x00\x00\x00\x00"


@functools.lru_cache(maxsize=1024)  # a broker sees few distinct hosts
def ip4(host: str) -> bytes:
    """The 4 bytes of an IPv4 address as a header's host fields hold them; other families
    and names are stored as 0.0.0.0."""
    try:
        return socket.inet_aton(host)
    except OSError:
        return ZERO_IP


def plain_tails(topic_head: bytes, properties: Sequence[bytes]) -> list[bytes]:
    """Each unit's tail: ``topic_head`` (:func:`~broker_core.protocol.unit.topic_head`),
    then each encoded properties' length and bytes."""
    return [topic_head + len(p).to_bytes(2, "big") + p for p in properties]


def unit_sizes(body_lengths: np.ndarray, tail_lengths: np.ndarray | int) -> np.ndarray:
    """Each unit's total size (int64) from its body and tail lengths."""
    return unit.HEADER_SIZE + body_lengths + tail_lengths


def plain_head(
    sizes: np.ndarray,
    body_lengths: np.ndarray,
    body_crcs: Sequence[int] | np.ndarray,
    *,
    born_ms: Sequence[int] | np.ndarray | int,
    tags_codes: Sequence[int] | np.ndarray,
) -> np.ndarray:
    """The headers of plain units as records of ``HEADER_DTYPE``: sizes, magic, body CRCs
    and lengths, born times and tag codes; every other field zero (see the module note)."""
    head = np.zeros(len(sizes), unit.HEADER_DTYPE)
    head["total_size"] = sizes
    head["magic"] = unit.MESSAGE_MAGIC
    head["body_crc"] = body_crcs
    head["born_timestamp_ms"] = born_ms
    head["tags_code"] = tags_codes
    head["body_length"] = body_lengths
    return head
