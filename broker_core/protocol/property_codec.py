"""The property codec: a message's properties as every wire and the commitlog hold them.

RocketMQ's ``MessageDecoder.messageProperties2String`` form, UTF-8, used alike by the
commitlog unit (:mod:`broker_core.protocol.unit`), the 4.x remoting wire (SEND_MESSAGE's
header field, the batch and pull bodies), the SendBulk frame and the RocketMQ trace
record (whose two splitters are the same two characters)::

    name₁ 0x01 value₁ 0x02 name₂ 0x01 value₂ 0x02 …

Names are not empty; no name or value holds 0x01 or 0x02 (the validation rules,
:mod:`broker_core.protocol.message_rules`, also refuse NUL from producers). This is the
only module that spells the two separators: everyone else imports them or calls these.

Scalar forms: :func:`encode_text` (no checks, as Java writes), :func:`encode_properties`
(checked: what the store writes), :func:`encode_send` (a send's fixed order: UNIQ_KEY,
TAGS, KEYS, then the user's), :func:`decode_text` / :func:`decode_properties` (entries
without a separator skipped, as Java reads), :func:`value_of` (one value, the rest left
encoded). Array forms (numpy), for
SendBulk's id-only properties (what a sender of bodies alone sends):
:func:`id_only_rows` builds them, :func:`ids_only` and :func:`ids_of_rows` read them.

>>> encode_send("ID1", "a", ["k1", "k2"], {"region": "eu"})
b'UNIQ_KEY\\x01ID1\\x02TAGS\\x01a\\x02KEYS\\x01k1 k2\\x02region\\x01eu\\x02'
>>> decode_properties(encode_properties({"a": "1", "b": ""}))
{'a': '1', 'b': ''}
>>> value_of(b"UNIQ_KEY\\x01ID1\\x02KEYS\\x01k\\x02", mark("KEYS"))
'k'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

from broker_core.errors import InvalidPropertyError
from broker_core.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from broker_core.protocol.byte_rows import rows_at

NAME_VALUE_SEP: Final = "\x01"
PROPERTY_SEP: Final = "\x02"
NAME_VALUE_SEP_BYTES: Final = NAME_VALUE_SEP.encode()
PROPERTY_SEP_BYTES: Final = PROPERTY_SEP.encode()
NAME_VALUE_BYTE: Final = NAME_VALUE_SEP_BYTES[0]
PROPERTY_BYTE: Final = PROPERTY_SEP_BYTES[0]
# The separators and NUL: no text a producer chooses may hold them.
RESERVED_CHARS: Final = re.compile("[\x00\x01\x02]")

_ID_HEAD: Final = f"{PROPERTY_UNIQ_KEY}\x01"
_TAGS: Final = f"{PROPERTY_TAGS}\x01"
_KEYS: Final = f"{PROPERTY_KEYS}\x01"


def mark(name: str) -> bytes:
    """What property ``name`` starts with in the encoded form (``name 0x01``)."""
    return f"{name}\x01".encode()


ID_HEAD: Final = mark(PROPERTY_UNIQ_KEY)  # id-only properties: ID_HEAD, the id, 0x02


# ---- scalar ------------------------------------------------------------------------------


def encode_text(props: Mapping[str, str]) -> str:
    """The encoded form, unchecked (as Java's ``messageProperties2String`` writes it)."""
    return "".join(f"{name}\x01{value}\x02" for name, value in props.items())


def encode_send(
    message_id: str,
    tag: str | None,
    keys: Sequence[str] | None,
    user: Mapping[str, str] | None,
) -> bytes:
    """A plain send's properties in the order every way in stores them (UNIQ_KEY, TAGS,
    KEYS, the user's): the caller has checked each text (``message_rules``)."""
    text = f"{_ID_HEAD}{message_id}\x02"
    if tag is not None:
        text += f"{_TAGS}{tag}\x02"
    if keys:
        text += f"{_KEYS}{KEY_SEPARATOR.join(keys)}\x02"
    if user:
        text += "".join(f"{name}\x01{value}\x02" for name, value in user.items())
    return text.encode()


def encode_properties(props: dict[str, str]) -> bytes:
    """The encoded form as the store writes it; InvalidPropertyError for a name that is
    empty or any text holding a separator or not str (what would not decode back)."""
    if not props:
        return b""
    try:  # str.join refuses anything but str, so this also checks the types
        text = PROPERTY_SEP.join(map(NAME_VALUE_SEP.join, props.items())) + PROPERTY_SEP
    except TypeError:
        text = ""
    n = len(props)
    if text.count(NAME_VALUE_SEP) != n or text.count(PROPERTY_SEP) != n or "" in props:
        _explain_bad_properties(props)
    try:
        return text.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate: not text UTF-8 can carry
        raise InvalidPropertyError(f"properties are not valid Unicode text: {exc}") from None


def _explain_bad_properties(props: dict[str, str]) -> None:
    """Raise the precise error for properties that failed the fast check."""
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidPropertyError(f"property {name!r} must map str to str")
        if NAME_VALUE_SEP in name or PROPERTY_SEP in name or not name:
            raise InvalidPropertyError(f"property name {name!r} is empty or has \\x01/\\x02")
        if NAME_VALUE_SEP in value or PROPERTY_SEP in value:
            raise InvalidPropertyError(f"property {name!r} value contains \\x01 or \\x02")
    raise InvalidPropertyError("properties do not encode")


def decode_text(text: str) -> dict[str, str]:
    """The properties of the encoded ``text``; entries without a separator or a name are
    skipped, as Java's ``string2messageProperties`` does."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEP):
        if item:  # the empty rest after the last separator: no partition for it
            name, sep, value = item.partition(NAME_VALUE_SEP)
            if sep and name:
                out[name] = value
    return out


def decode_properties(raw: bytes) -> dict[str, str]:
    """:func:`decode_text` of UTF-8 bytes (UnicodeDecodeError for other bytes); written
    out again, not a call of it: the store decodes every message it hands out."""
    out: dict[str, str] = {}
    if raw:
        for item in raw.decode().split(PROPERTY_SEP):
            if item:
                name, sep, value = item.partition(NAME_VALUE_SEP)
                if sep and name:
                    out[name] = value
    return out


def value_of(props: bytes, name_mark: bytes) -> str | None:
    """The value of the first property that starts with ``name_mark`` (:func:`mark`) in
    the encoded ``props``, the others left encoded; None when there is none."""
    i = props.find(name_mark)
    while i > 0 and props[i - 1] != PROPERTY_BYTE:
        i = props.find(name_mark, i + 1)
    if i < 0:
        return None
    start = i + len(name_mark)
    end = props.find(PROPERTY_SEP_BYTES, start)
    return props[start : end if end >= 0 else len(props)].decode()


def split_terminated(rows: np.ndarray) -> list[str]:
    """The ASCII texts each ending in 0x02 of the rows of ``rows`` (uint8), in order."""
    return rows.tobytes().decode("ascii").split(PROPERTY_SEP)[:-1]


# ---- arrays: id-only properties ----------------------------------------------------------


def id_only_rows(ids: np.ndarray) -> np.ndarray:
    """Each id (a row of ``ids``: ASCII, uint8, all of one length) as its properties
    ``UNIQ_KEY 0x01 id 0x02``, the rows of a 2-D uint8 array."""
    count, width = ids.shape
    head = len(ID_HEAD)
    rows = np.empty((count, head + width + 1), np.uint8)
    rows[:, :head] = _ID_HEAD_BYTES
    rows[:, head:-1] = ids
    rows[:, -1] = PROPERTY_BYTE
    return rows


_ID_HEAD_BYTES: Final = np.frombuffer(ID_HEAD, np.uint8)
_BETWEEN_IDS: Final = PROPERTY_SEP + _ID_HEAD
_BLANK: Final = np.zeros(256, bool)  # per byte value: str.isspace, ASCII (np.isin is slow)
_BLANK[np.frombuffer(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f", np.uint8)] = True


def ids_of_rows(rows: np.ndarray, max_id_chars: int) -> tuple[list[str], str] | None:
    """:func:`ids_only` for properties of one length, the rows of ``rows``, checked as
    one string: every row ends with its only 0x02, so the n - 1 separators found between
    ids sit at row boundaries, and with n 0x01 in all no id holds one. Returns the ids
    and that string (the rows back to back: message trace reads the ids there)."""
    count, head = len(rows), len(ID_HEAD)
    if not 1 <= rows.shape[1] - head - 1 <= max_id_chars or (rows[:, -1] != PROPERTY_BYTE).any():
        return None
    try:
        text = rows.tobytes().decode("ascii")
    except UnicodeDecodeError:
        return None
    if (
        text.count(PROPERTY_SEP) != count
        or text.count(NAME_VALUE_SEP) != count
        or "\x00" in text
        or not text.startswith(_ID_HEAD)
    ):
        return None
    ids = text[head:-1].split(_BETWEEN_IDS)
    if len(ids) != count:
        return None
    ids_bytes = rows[:, head:-1]
    if int(ids_bytes.min()) <= 0x20 and not (~_BLANK[ids_bytes]).any(axis=1).all():
        return None  # an id of blanks alone (none can be when no byte is a blank)
    return ids, text


def ids_only(block: np.ndarray, lengths: np.ndarray, max_id_chars: int) -> list[str] | None:
    """Every message id when every message's properties (``block``, ``lengths`` each) are
    ``UNIQ_KEY 0x01 id 0x02`` with a plain ASCII id of at most ``max_id_chars``, checked
    as arrays; None when any message holds more (or anything odd)."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    head = len(ID_HEAD)
    id_lengths = lengths - head - 1
    if (
        int(id_lengths.min()) < 1
        or int(id_lengths.max()) > max_id_chars
        or int(block.max()) >= 0x80
        or int(block.min()) == 0
    ):
        return None
    seps = np.flatnonzero(block <= PROPERTY_BYTE)  # exactly one of each separator a message
    expected = np.empty(2 * len(starts), np.int64)
    expected[0::2], expected[1::2] = starts + head - 1, ends - 1
    if (
        len(seps) != len(expected)
        or not np.array_equal(seps, expected)
        or not (block[expected[0::2]] == NAME_VALUE_BYTE).all()
    ):
        return None
    heads = rows_at(block, starts, head)
    if not (heads == _ID_HEAD_BYTES).all():
        return None
    blank = _BLANK[block]
    if blank.any():  # rare: then each id needs some byte other than a space
        visible = np.zeros(len(block) + 1, np.int64)
        np.cumsum(~blank, out=visible[1:])
        if (visible[ends - 1] - visible[starts + head] < 1).any():
            return None
    text = block.tobytes().decode("ascii")
    return [text[a:b] for a, b in zip((starts + head).tolist(), (ends - 1).tolist(), strict=True)]
