"""The commitlog message unit's layout: one field table, from which the ``struct.Struct``
used to encode and decode one unit and the numpy dtype used to pack and read many units
at once are both built (so they cannot disagree).

All integers are big-endian. One unit::

    offset size field
    0      4    total_size                 int32   bytes of the whole unit, this field included
    4      4    magic                      uint32  MESSAGE_MAGIC, or BLANK_MAGIC for end-of-segment
    8      4    unit_crc                   uint32  CRC32 of the topic/properties tail, then
                                               continued over header bytes [12, 100)
    12     4    body_crc                   uint32  CRC32 of the body
    16     4    queue_id                   int32
    20     4    flag                       int32   producer's flag, opaque to the store
    24     8    queue_offset               int64   logical offset in its consume queue
    32     8    physical_offset            int64   offset of this unit in the commitlog
    40     4    sys_flag                   int32   SYSFLAG_* bits (transaction type, …)
    44     8    born_timestamp_ms          int64
    52     4    born_host_ip               4 B     IPv4; other families are stored as 0.0.0.0
    56     4    born_host_port             int32
    60     8    store_timestamp_ms         int64
    68     4    store_host_ip              4 B
    72     4    store_host_port            int32
    76     4    reconsume_times            int32
    80     8    prepared_transaction_offset int64
    88     8    tags_code                  int64   consume-queue tag hash (0 = no tag)
    96     4    body_length                int32
    100    n    body
    …      1    topic_length               uint8
    …      t    topic                      UTF-8
    …      2    properties_length          uint16
    …      p    properties                 UTF-8, ``name \\x01 value \\x02`` repeated

A blank (end-of-segment) unit is only ``total_size | BLANK_MAGIC``.

>>> HEADER.size, HEADER_DTYPE.itemsize, HEADER_DTYPE.fields["store_timestamp_ms"][1]
(100, 100, 60)
"""

from __future__ import annotations

import functools
import struct
from typing import Final

import numpy as np

from broker_core.errors import InvalidTopicError

# gathering and scattering fixed-width rows of units (one home, shared with the codec)
from broker_core.protocol.byte_rows import rows_at as rows_at
from broker_core.protocol.byte_rows import write_rows as write_rows

# the properties' separators, re-exported for readers of the tail
from broker_core.protocol.property_codec import NAME_VALUE_SEP as NAME_VALUE_SEP
from broker_core.protocol.property_codec import PROPERTY_SEP as PROPERTY_SEP

MESSAGE_MAGIC: Final = 0x524D5131  # "RMQ1"
BLANK_MAGIC: Final = 0x524D5130  # "RMQ0"
MIN_BLANK_BYTES: Final = 8

# name, struct code, numpy type: the fixed header, in byte order (big-endian throughout).
FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("total_size", "i", ">i4"),
    ("magic", "I", ">u4"),
    ("unit_crc", "I", ">u4"),
    ("body_crc", "I", ">u4"),
    ("queue_id", "i", ">i4"),
    ("flag", "i", ">i4"),
    ("queue_offset", "q", ">i8"),
    ("physical_offset", "q", ">i8"),
    ("sys_flag", "i", ">i4"),
    ("born_timestamp_ms", "q", ">i8"),
    ("born_host_ip", "4s", "V4"),
    ("born_host_port", "i", ">i4"),
    ("store_timestamp_ms", "q", ">i8"),
    ("store_host_ip", "4s", "V4"),
    ("store_host_port", "i", ">i4"),
    ("reconsume_times", "i", ">i4"),
    ("prepared_transaction_offset", "q", ">i8"),
    ("tags_code", "q", ">i8"),
    ("body_length", "i", ">i4"),
)

HEADER: Final = struct.Struct(">" + "".join(code for _, code, _ in FIELDS))
HEADER_SIZE: Final = HEADER.size
HEADER_DTYPE: Final = np.dtype([(name, kind) for name, _, kind in FIELDS])


def field_pos(name: str) -> int:
    """The byte position of header field ``name`` in a unit."""
    fields = HEADER_DTYPE.fields
    if fields is None or name not in fields:
        raise KeyError(f"no header field {name!r}")
    return int(fields[name][1])


SIZE_MAGIC: Final = struct.Struct(">iI")
STORE_TIME: Final = struct.Struct(">q")
CRC: Final = struct.Struct(">I")
STORE_TIME_POS: Final = field_pos("store_timestamp_ms")
STORE_HOST_POS: Final = field_pos("store_host_ip")
UNIT_CRC_POS: Final = field_pos("unit_crc")
CRC_START: Final = field_pos("body_crc")  # the unit CRC covers the header from here on
TOPIC_LEN: Final = struct.Struct(">B")
PROPS_LEN: Final = struct.Struct(">H")
MIN_UNIT_BYTES: Final = HEADER_SIZE + TOPIC_LEN.size + PROPS_LEN.size


@functools.lru_cache(maxsize=4096)
def topic_head(topic: str) -> bytes:
    """The topic length byte and the UTF-8 topic, as a unit's tail starts (cached: a
    broker or a producer sees few distinct topics). Raises InvalidTopicError."""
    try:
        raw = topic.encode()
    except UnicodeEncodeError:
        raise InvalidTopicError(f"topic {topic!r} is not valid Unicode text") from None
    if not 0 < len(raw) <= 127:
        raise InvalidTopicError(f"topic {topic!r} must be 1 to 127 bytes of UTF-8")
    return TOPIC_LEN.pack(len(raw)) + raw


# sys_flag bits
SYSFLAG_TRANSACTION_MASK: Final = 0x0C
SYSFLAG_TRANSACTION_NONE: Final = 0x00
SYSFLAG_TRANSACTION_PREPARED: Final = 0x04
SYSFLAG_TRANSACTION_COMMIT: Final = 0x08
SYSFLAG_TRANSACTION_ROLLBACK: Final = 0x0C
# Units of these transaction states are stored and indexed but never enter a queue.
NOT_IN_QUEUE: Final = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)
