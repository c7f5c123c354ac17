"""What a producer may send: the validation rules of every way in, written once.

SendMessage (``server/convert_in`` and its fast lane ``server/convert_columns``),
SendBulk (``server/convert_bulk``) and the 4.x remoting sends all check a message against
these rules, before anything is stored. A fast lane tests the predicates (``plain_*``:
True when the text certainly passes) and leaves anything else to its general path, which
raises the precise error with the ``check_*`` functions; so every lane accepts and
refuses the same messages.

========================  ==========================================================
text                      rule
========================  ==========================================================
message id (UNIQ_KEY)     required, not blank, ≤ MAX_MESSAGE_ID_CHARS
tag (TAGS)                not blank, ≤ MAX_TAG_CHARS, no ``|`` (it separates filter tags)
each key (KEYS)           not blank, ≤ MAX_TAG_CHARS, no space (keys are space-joined)
message group             not blank, ≤ MAX_MESSAGE_GROUP_CHARS
user property name        not blank, ≤ MAX_PROPERTY_KEY_CHARS, not a system key
every text above, values  no NUL and no property separator (:data:`RESERVED_CHARS`)
properties, encoded       ≤ the store's limit and ≤ 0xFFFF bytes (a unit's length field)
========================  ==========================================================

>>> check_tag("paid"), plain_tag("a|b")
('paid', False)
>>> born_host("10.0.0.1", "192.168.1.9"), born_host("my-host", "192.168.1.9")
('10.0.0.1', '192.168.1.9')
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from broker_core.errors import (
    InvalidArgumentError,
    InvalidKeyError,
    InvalidMessageIdError,
    InvalidPropertyError,
    InvalidTagError,
    MessageCorruptedError,
    PropertiesTooLargeError,
)
from broker_core.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from broker_core.protocol.properties import SYSTEM_PROPERTY_KEYS
from broker_core.protocol.property_codec import NAME_VALUE_SEP, PROPERTY_SEP, RESERVED_CHARS

MAX_MESSAGE_GROUP_CHARS: Final = 64  # RocketMQ proxy's default maxMessageGroupSize
MAX_MESSAGE_ID_CHARS: Final = 128
MAX_TAG_CHARS: Final = 255
MAX_PROPERTY_KEY_CHARS: Final = 1024
MAX_PROPERTIES_FIELD_BYTES: Final = 0xFFFF  # the unit's properties length is a uint16
TAG_SEPARATOR: Final = "|"


@dataclass(frozen=True, slots=True)
class Limits:
    """The store's size limits a message is checked against (``StoreConfig``)."""

    max_body_bytes: int
    max_properties_bytes: int

    @property
    def properties_cap(self) -> int:
        """The most bytes encoded properties may take (the limit, within a unit's field)."""
        return min(self.max_properties_bytes, MAX_PROPERTIES_FIELD_BYTES)


# ---- predicates: True when a text certainly passes (reserved characters aside) -----------


def plain(text: str, max_chars: int) -> bool:
    """Not blank and not too long (reserved characters are the caller's: a fast lane
    checks all of a request's texts at once with :func:`has_reserved`)."""
    return 0 < len(text) <= max_chars and not text.isspace()


def has_reserved(text: str) -> bool:
    """Whether ``text`` holds NUL or a property separator."""
    return RESERVED_CHARS.search(text) is not None


def plain_tag(tag: str) -> bool:
    return plain(tag, MAX_TAG_CHARS) and TAG_SEPARATOR not in tag


def plain_key(key: str) -> bool:
    return plain(key, MAX_TAG_CHARS) and KEY_SEPARATOR not in key


def plain_user_key(name: str) -> bool:
    return plain(name, MAX_PROPERTY_KEY_CHARS) and name not in SYSTEM_PROPERTY_KEYS


# ---- checks: the text back, or the precise error ------------------------------------------


def check_text(
    what: str, value: str, max_chars: int, error: type[InvalidArgumentError] = InvalidPropertyError
) -> str:
    """Return ``value`` if it is non-blank, short enough and free of reserved characters."""
    if not value.strip():
        raise error(f"{what} is blank")
    if len(value) > max_chars:
        raise error(f"{what} is {len(value)} chars, over {max_chars}")
    if RESERVED_CHARS.search(value):
        raise error(f"{what} {value[:40]!r} contains \\x00, \\x01 or \\x02")
    return value


def check_message_id(message_id: str) -> str:
    if not message_id:
        raise InvalidMessageIdError("message id is empty: every message needs the client's id")
    return check_text("message id", message_id, MAX_MESSAGE_ID_CHARS, InvalidMessageIdError)


def check_tag(tag: str) -> str:
    check_text("tag", tag, MAX_TAG_CHARS, InvalidTagError)
    if TAG_SEPARATOR in tag:
        raise InvalidTagError(f"tag {tag!r} contains '|' (it separates tags in filters)")
    return tag


def check_keys(keys: Sequence[str]) -> list[str]:
    checked = [check_text("key", k, MAX_TAG_CHARS, InvalidKeyError) for k in keys]
    for key in checked:
        if KEY_SEPARATOR in key:
            raise InvalidKeyError(f"key {key!r} contains a space (keys are space-separated)")
    return checked


def check_user_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The user properties, refusing system keys and characters the store reserves."""
    out: dict[str, str] = {}
    for key, value in props.items():
        check_text("user property key", key, MAX_PROPERTY_KEY_CHARS)
        if key in SYSTEM_PROPERTY_KEYS:
            raise InvalidPropertyError(f"user property key {key!r} is reserved by the broker")
        if has_reserved(value):
            raise InvalidPropertyError(f"user property {key!r}: value contains \\x00-\\x02")
        out[key] = value
    return out


def check_properties_size(props: Mapping[str, str], limit_bytes: int) -> None:
    """Refuse properties whose encoding (name, value and a separator each) exceeds the limit."""
    size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in props.items())
    if size > limit_bytes:
        raise PropertiesTooLargeError(
            f"message properties are {size} bytes encoded, over the limit of {limit_bytes}"
        )


@functools.lru_cache(maxsize=1024)  # a producer sends the same claim with every message
def born_host(claimed: str, peer_host: str) -> str:
    """The born host to store: the client's own IPv4 address if it gave one, else the peer."""
    parts = claimed.split(".")
    if len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts):
        return claimed
    return peer_host


def check_encoded(raw: bytes, index: int) -> tuple[str | None, list[str]]:
    """(tag, [message id, *keys]) of message ``index``'s properties as a producer encoded
    them (SendBulk): UTF-8, well formed, UNIQ_KEY first and plain, TAGS and KEYS as
    SendMessage accepts them, no other system key. Raises the first problem found."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MessageCorruptedError(
            f"SendBulk: properties of message {index} are not UTF-8"
        ) from None
    if not text.endswith(PROPERTY_SEP) or "\x00" in text:
        raise InvalidPropertyError(f"SendBulk: properties of message {index} are malformed")
    tag: str | None = None
    keys: list[str] = []
    # read and checked in one pass (a list of pairs first costs SendBulk ~8%: measured)
    for position, pair in enumerate(text[:-1].split(PROPERTY_SEP)):
        name, sep, value = pair.partition(NAME_VALUE_SEP)
        if not sep or NAME_VALUE_SEP in value:
            raise InvalidPropertyError(
                f"SendBulk: property {pair!r} of message {index} is not name/value"
            )
        if position == 0:
            if name != PROPERTY_UNIQ_KEY or not plain(value, MAX_MESSAGE_ID_CHARS):
                raise InvalidMessageIdError(
                    f"SendBulk: message {index} needs a message id (UNIQ_KEY, first)"
                )
            keys.insert(0, value)
        elif name == PROPERTY_TAGS and tag is None:
            if not plain_tag(value):
                raise InvalidTagError(f"SendBulk: bad tag {value!r} of message {index}")
            tag = value
        elif name == PROPERTY_KEYS and len(keys) == 1:
            extra = value.split(KEY_SEPARATOR)
            if not all(plain(key, MAX_TAG_CHARS) for key in extra):
                raise InvalidKeyError(f"SendBulk: bad keys {value!r} of message {index}")
            keys.extend(extra)
        elif not plain_user_key(name):
            raise InvalidPropertyError(f"SendBulk: message {index} may not set property {name!r}")
    return tag, keys
