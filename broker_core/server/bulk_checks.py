"""Checking a SendBulk frame's units as arrays: headers, tails, the id-only properties.

Every unit's 100-byte header is gathered at the unit starts in one numpy gather (a
strided view of every window, ``unit.rows_at``), and all rules are tested together with
a few whole-array reductions; only when one fails are they tested again rule by rule, to
name the first unit breaking the first rule. Nothing here touches the store. Used by
``convert_bulk``. The properties are read by the property codec
(:mod:`broker_core.protocol.property_codec`).

Rules (in the order checked):

* ``total_size`` equals the size the frame declares; magic is a message's;
* plain messages: flag, sys_flag, reconsume times, prepared-transaction offset zero;
* the fields the broker fills are zero: queue id, queue offset, physical offset, store
  time and host, born host; born time not negative;
* body length at least 1 and within the broker's limit, and the body leaves room for a
  tail;
* body, topic and properties lengths add up to the unit's size; the topic is the
  request's (length byte and bytes); the properties within the broker's limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from broker_core.errors import (
    EmptyBodyError,
    InvalidTopicError,
    MessageCorruptedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from broker_core.protocol import unit as layout
from broker_core.protocol import unit_crc
from broker_core.protocol.message_rules import MAX_MESSAGE_ID_CHARS
from broker_core.protocol.property_codec import ids_of_rows, ids_only

# What the client leaves to the broker (the append's open fields, the born host) and what a
# plain message has none of.
_MUST_BE_ZERO: Final = (
    *unit_crc.OPEN_FIELDS,
    "born_host_ip",
    "born_host_port",
    "flag",
    "sys_flag",
    "reconsume_times",
    "prepared_transaction_offset",
)
_ZERO_POSITIONS: Final = unit_crc.field_positions(_MUST_BE_ZERO)
# The magic and the fields that must be zero, as 4-byte words of the header: a few
# whole-array reductions check them all.
_MAGIC_WORD: Final = layout.field_pos("magic") // 4
_MAGIC_NATIVE: Final = np.frombuffer(layout.MESSAGE_MAGIC.to_bytes(4, "big"), np.uint32)[0]
_ZERO_WORDS: Final = (slice(16 // 4, 44 // 4), slice(52 // 4, 88 // 4))
assert np.array_equal(np.r_[16:44, 52:88], _ZERO_POSITIONS), (
    "the zero fields moved: update _ZERO_WORDS"
)
_NO_SUM: Final = "lengths (body, topic, properties) do not add up to its size"
_OTHER_TOPIC: Final = "is not of the request's topic"


@dataclass(frozen=True, slots=True)
class Units:
    """A frame's units located: headers gathered, properties found."""

    data: np.ndarray  # uint8, the units back to back
    starts: np.ndarray  # int64
    head: np.ndarray  # records of HEADER_DTYPE (a contiguous copy)
    props_starts: np.ndarray  # int64, in ``data``
    props_lengths: np.ndarray  # int64
    props_rows: np.ndarray | None  # the properties as rows, when all have one length


def _refuse(bad: np.ndarray, error: type[Exception], what: str) -> None:
    if bad.any():
        raise error(f"SendBulk: unit {int(np.flatnonzero(bad)[0])} {what}")


def _refuse_set_fields(headers: np.ndarray) -> None:
    """Refuse units setting a field that must be zero, naming the field."""
    for name in _MUST_BE_ZERO:
        positions = unit_crc.field_positions((name,))
        _refuse(
            np.asarray(headers[:, positions].any(axis=1)),
            MessageCorruptedError,
            f"sets {name}, which must be 0",
        )


def _check_headers(
    head: np.ndarray, headers: np.ndarray, sizes: np.ndarray, max_body_bytes: int
) -> np.ndarray:
    """The body lengths (int64) once every header is checked: one combined test, then,
    only when it fails, rule by rule to name the first unit breaking the first rule."""
    body = head["body_length"].astype(np.int64)
    words = headers.view(np.uint32)  # native order: only compared with constants
    bad = (
        (head["total_size"] != sizes).any()
        or ((body - 1).view(np.uint64) >= max_body_bytes).any()  # below 1 wraps: too big
        or (head["born_timestamp_ms"] < 0).any()
        or (words[:, _MAGIC_WORD] != _MAGIC_NATIVE).any()
        or any(np.count_nonzero(words[:, span]) for span in _ZERO_WORDS)
    )
    if bad:
        _refuse(head["total_size"] != sizes, MessageCorruptedError, "size differs from the frame's")
        _refuse(head["magic"] != layout.MESSAGE_MAGIC, MessageCorruptedError, "has a bad magic")
        _refuse_set_fields(headers)
        _refuse(head["born_timestamp_ms"] < 0, MessageCorruptedError, "has a negative born time")
        _refuse(body < 1, EmptyBodyError, "has an empty body")
        _refuse(
            body > max_body_bytes,
            MessageTooLargeError,
            f"has a body over the limit of {max_body_bytes} bytes",
        )
    return body


def check_units(
    data: np.ndarray,
    sizes: np.ndarray,
    topic_head: bytes,
    *,
    max_body_bytes: int,
    max_properties_bytes: int,
) -> Units:
    """Locate and check every unit of ``data`` (sizes from the frame); raises the first
    rule broken (see the module docstring), naming the unit."""
    starts = np.cumsum(sizes) - sizes
    headers = layout.rows_at(data, starts, layout.HEADER_SIZE)
    head = headers.view(layout.HEADER_DTYPE).reshape(len(sizes))
    body = _check_headers(head, headers, sizes, max_body_bytes)
    ends = starts + sizes
    tail_at = starts + layout.HEADER_SIZE + body
    fixed = len(topic_head) + layout.PROPS_LEN.size  # the tail up to the properties
    props_starts = tail_at + fixed
    props_lengths = ends - props_starts
    limit = min(max_properties_bytes, 0xFFFF)
    shortest, longest = int(props_lengths.min()), int(props_lengths.max())
    if shortest < 0 or longest > limit:
        _name_tail_problem(data, tail_at, ends, topic_head, limit)
    same = shortest == longest  # then the properties come in the same gather, as rows
    tails = layout.rows_at(data, tail_at, fixed + longest if same else fixed)
    declared = tails[:, fixed - 2 : fixed].copy().view(">u2")[:, 0]
    wanted = np.frombuffer(topic_head, np.uint8)
    if (tails[:, : fixed - 2] != wanted).any() or (declared != props_lengths).any():
        _name_tail_problem(data, tail_at, ends, topic_head, limit)
    rows = tails[:, fixed:] if same else None
    return Units(data, starts, head, props_starts, props_lengths, rows)


def _name_tail_problem(
    data: np.ndarray, tail_at: np.ndarray, ends: np.ndarray, topic_head: bytes, limit: int
) -> None:
    """Raise the first tail problem, read with each unit's own topic length."""
    fixed = layout.TOPIC_LEN.size + layout.PROPS_LEN.size
    _refuse(tail_at + fixed > ends, MessageCorruptedError, "is too short for its body length")
    topic_lengths = data[tail_at].astype(np.int64)
    length_at = tail_at + layout.TOPIC_LEN.size + topic_lengths
    readable = np.minimum(length_at, len(data) - layout.PROPS_LEN.size)  # checked next
    props_lengths = (data[readable].astype(np.int64) << 8) | data[readable + 1]
    sums = length_at + layout.PROPS_LEN.size + props_lengths
    _refuse(
        (sums != ends) | (length_at + layout.PROPS_LEN.size > ends), MessageCorruptedError, _NO_SUM
    )
    wanted = np.frombuffer(topic_head, np.uint8)
    _refuse(topic_lengths != len(wanted) - 1, InvalidTopicError, _OTHER_TOPIC)
    topics = layout.rows_at(data, tail_at, len(wanted))
    _refuse((topics != wanted).any(axis=1), InvalidTopicError, _OTHER_TOPIC)
    _refuse(
        props_lengths > limit,
        PropertiesTooLargeError,
        f"has properties over the limit of {limit} bytes",
    )
    raise MessageCorruptedError("SendBulk: a unit's tail does not parse")  # not reached


def properties_block(units: Units) -> np.ndarray:
    """Every unit's properties, back to back (uint8)."""
    lengths, starts = units.props_lengths, units.props_starts
    if int(lengths.min()) == int(lengths.max()):
        return layout.rows_at(units.data, starts, int(lengths[0])).reshape(-1)
    ends = np.cumsum(lengths)
    index = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
    return units.data[index]


def message_ids(units: Units) -> tuple[list[str], str | None] | None:
    """The message ids when every unit's properties are the id alone
    (``property_codec.ids_only``): as the rows of one array when they are all of one
    length (a sender of bodies alone; then also those properties as one string, each
    ``UNIQ_KEY 0x01 id 0x02``), else gathered into one block; None otherwise."""
    if units.props_rows is None:
        ids = ids_only(properties_block(units), units.props_lengths, MAX_MESSAGE_ID_CHARS)
        return None if ids is None else (ids, None)
    return ids_of_rows(units.props_rows, MAX_MESSAGE_ID_CHARS)
