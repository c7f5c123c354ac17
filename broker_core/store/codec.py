"""The commitlog message unit: one message as it sits on disk.

The unit's bytes are drawn, and its layout declared, in :mod:`broker_core.protocol.unit`
(one field table shared with the client). This module holds what encoding a message needs
(properties, topic, hosts, the index keys; ``columns`` builds batches with them and
``packer`` finishes units) and checks and decodes units read back.

A blank (end-of-segment) unit is only ``total_size | BLANK_MAGIC`` and fills the rest of
its segment; fewer than 8 trailing bytes are left zero. A zero ``total_size`` means
nothing was written there yet.

Crash contract: the unit CRC covers every header byte after itself, the topic and the
properties; the body is covered by ``body_crc``, which the unit CRC covers in turn. So a
unit decodes only if every byte is as written. The physical offset field must equal the
unit's position, which catches stale units left behind a truncation. Whatever the bytes,
reading raises CorruptionError and nothing else: a unit whose CRCs match but whose
lengths or text do not make sense (only a writer bug makes one) is corruption too.
"""

from __future__ import annotations

import mmap
import socket
import zlib
from dataclasses import dataclass
from typing import Final, NoReturn

import numpy as np

from broker_core.errors import CorruptionError, InvalidArgumentError
from broker_core.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
)
from broker_core.protocol.property_codec import decode_properties, mark, value_of

# the property codec's checked encoder, what every unit's properties are written with
from broker_core.protocol.property_codec import encode_properties as encode_properties
from broker_core.protocol.unit import (
    BLANK_MAGIC,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    PROPS_LEN,
    SIZE_MAGIC,
)
from broker_core.protocol.unit_builder import ZERO_IP as ZERO_IP
from broker_core.protocol.unit_builder import ip4 as ip4
from broker_core.protocol.verify import verify_units

Buffer = bytes | bytearray | memoryview | mmap.mmap

_I32 = range(-(2**31), 2**31)
_I64 = range(-(2**63), 2**63)


def explain_bad_ranges(msg: Message, born_port: int) -> NoReturn:
    """Raise InvalidArgumentError naming the integer of ``msg`` the header cannot hold
    (called once packing the header failed)."""
    for name, value, allowed in (
        ("queue_id", msg.queue_id, _I32),
        ("flag", msg.flag, _I32),
        ("sys_flag", msg.sys_flag, _I32),
        ("born port", born_port, _I32),
        ("reconsume_times", msg.reconsume_times, _I32),
        ("born_timestamp_ms", msg.born_timestamp_ms, _I64),
        ("prepared_transaction_offset", msg.prepared_transaction_offset, _I64),
    ):
        if not isinstance(value, int):
            break
        if value not in allowed:
            raise InvalidArgumentError(f"message {name} {value} does not fit the unit header")
    raise InvalidArgumentError("message header fields must be integers")


def index_keys(props: dict[str, str]) -> list[str]:
    """What dispatch files in the index for a message: UNIQ_KEY, then each of KEYS."""
    keys = [props[PROPERTY_UNIQ_KEY]] if props.get(PROPERTY_UNIQ_KEY) else []
    raw = props.get(PROPERTY_KEYS)
    if raw:
        keys.extend(k for k in raw.split(KEY_SEPARATOR) if k)
    return keys


def blank_unit(size: int) -> bytes:
    """An end-of-segment marker covering ``size`` bytes (only its 8-byte head is written)."""
    return SIZE_MAGIC.pack(size, BLANK_MAGIC)


def check_unit(buf: Buffer, pos: int, expected_phys: int, path: str = "") -> int:
    """Verify the unit at ``buf[pos:]`` and return its total size.

    Raises CorruptionError for a unit that does not verify, whatever ``buf`` holds. The
    caller handles blank markers and zero (unwritten) sizes before calling.
    """
    limit = len(buf) - pos
    if limit < SIZE_MAGIC.size:
        raise CorruptionError(
            f"truncated unit: {max(0, limit)} bytes", path=path, position=expected_phys
        )
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise CorruptionError(f"bad magic {magic:#x}", path=path, position=expected_phys)
    if total < HEADER_SIZE + 3 or total > limit:
        raise CorruptionError(f"bad unit size {total}", path=path, position=expected_phys)
    fields = HEADER.unpack_from(buf, pos)
    unit_crc, body_crc, phys, body_len = fields[2], fields[3], fields[7], fields[18]
    if phys != expected_phys:
        raise CorruptionError(
            f"unit records offset {phys}, expected {expected_phys}",
            path=path,
            position=expected_phys,
        )
    if body_len < 0 or HEADER_SIZE + body_len + 3 > total:
        raise CorruptionError(f"bad body length {body_len}", path=path, position=expected_phys)
    view = memoryview(buf)[pos : pos + total]
    try:
        crc = zlib.crc32(view[HEADER_SIZE + body_len :])
        crc = zlib.crc32(view[CRC_START:HEADER_SIZE], crc)
        if crc != unit_crc:
            raise CorruptionError("unit CRC mismatch", path=path, position=expected_phys)
        if zlib.crc32(view[HEADER_SIZE : HEADER_SIZE + body_len]) != body_crc:
            raise CorruptionError("body CRC mismatch", path=path, position=expected_phys)
        problem = _tail_problem(view[HEADER_SIZE + body_len :])
    finally:
        view.release()
    if problem:  # checksums match what a buggy writer laid out: still not a unit
        raise CorruptionError(problem, path=path, position=expected_phys)
    return int(total)


def check_units(
    buf: Buffer, pos: int, sizes: list[int], expected_phys: int, path: str = ""
) -> tuple[int, CorruptionError | None]:
    """Verify message units of ``sizes`` back to back at ``buf[pos:]`` (the first at global
    offset ``expected_phys``) with the shared vectorised verifier (``protocol.verify``),
    plus each unit's physical offset field.

    Returns how many leading units verify and, when not all do, the first bad one's
    error (found again with :func:`check_unit`, which names what is wrong with it).
    """
    end = pos + sum(sizes)
    if end > len(buf):
        raise CorruptionError(f"units run past the buffer end {len(buf)}", path=path)
    try:  # a copy of the run: no buffer export left on a mapping that may be closed
        spans = verify_units(bytes(buf[pos:end]), np.array(sizes, np.int64))
        if (spans.head["physical_offset"] == expected_phys + spans.starts).all():
            return len(sizes), None
    except CorruptionError:
        pass
    at = pos
    for index, size in enumerate(sizes):  # the rare case: say which unit and why
        try:
            check_unit(buf, at, expected_phys + at - pos, path)
        except CorruptionError as exc:
            return index, exc
        at += size
    return len(sizes), None  # the batch check was stricter than the unit check: trust units


def _tail_problem(tail: memoryview) -> str:
    """Why the topic/properties tail does not fill its unit exactly ("" when it does)."""
    topic_len = tail[0]
    props_at = 1 + topic_len
    if topic_len == 0 or props_at + PROPS_LEN.size > len(tail):
        return f"bad topic length {topic_len}"
    props_len = PROPS_LEN.unpack_from(tail, props_at)[0]
    if props_at + PROPS_LEN.size + props_len != len(tail):
        return f"bad properties length {props_len}"
    return ""


def decode(buf: Buffer, pos: int = 0) -> StoredMessage:
    """Decode a unit known to be valid (see :func:`check_unit`).

    Text that is not UTF-8 (possible only in a unit a buggy writer checksummed) raises
    CorruptionError.
    """
    try:
        return _decode(buf, pos)
    except UnicodeDecodeError as exc:
        raise _not_utf8(buf, pos, exc) from None


def _not_utf8(buf: Buffer, pos: int, exc: UnicodeDecodeError) -> CorruptionError:
    return CorruptionError(
        f"unit text is not UTF-8: {exc}", position=HEADER.unpack_from(buf, pos)[7]
    )


def _decode(buf: Buffer, pos: int) -> StoredMessage:
    f = HEADER.unpack_from(buf, pos)
    total, body_len = f[0], f[18]
    body_start = pos + HEADER_SIZE
    body = bytes(buf[body_start : body_start + body_len])
    p = body_start + body_len
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    props_len = PROPS_LEN.unpack_from(buf, p)[0]
    props = decode_properties(bytes(buf[p + 2 : p + 2 + props_len]))
    return StoredMessage(
        topic=topic,
        queue_id=f[4],
        queue_offset=f[6],
        physical_offset=f[7],
        body=body,
        properties=props,
        flag=f[5],
        sys_flag=f[8],
        born_timestamp_ms=f[9],
        born_host=(socket.inet_ntoa(f[10]), f[11]),
        store_timestamp_ms=f[12],
        store_host=(socket.inet_ntoa(f[13]), f[14]),
        reconsume_times=f[15],
        prepared_transaction_offset=f[16],
        body_crc=f[3],
        stored_size=total,
    )


@dataclass(slots=True)
class DispatchRequest:
    """What dispatch needs from a unit: where it goes and how to index it."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    sys_flag: int
    store_timestamp_ms: int
    keys: list[str]


_KEYS_MARK: Final = mark(PROPERTY_KEYS)
_UNIQ_MARK: Final = mark(PROPERTY_UNIQ_KEY)


def dispatch_request(buf: Buffer, pos: int) -> DispatchRequest:
    """Read only what dispatch needs from the (already verified) unit at ``pos``.

    Like :func:`decode`, text that is not UTF-8 raises CorruptionError.
    """
    try:
        return _dispatch_request(buf, pos)
    except UnicodeDecodeError as exc:
        raise _not_utf8(buf, pos, exc) from None


def _dispatch_request(buf: Buffer, pos: int) -> DispatchRequest:
    f = HEADER.unpack_from(buf, pos)
    p = pos + HEADER_SIZE + f[18]
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    props_len = PROPS_LEN.unpack_from(buf, p)[0]
    props = bytes(buf[p + 2 : p + 2 + props_len])
    keys: list[str] = []
    uniq = value_of(props, _UNIQ_MARK)
    if uniq:
        keys.append(uniq)
    raw_keys = value_of(props, _KEYS_MARK)
    if raw_keys:
        keys.extend(k for k in raw_keys.split(" ") if k)
    return DispatchRequest(topic, f[4], f[6], f[7], f[0], f[17], f[8], f[12], keys)
