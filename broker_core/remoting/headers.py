"""The two header encodings of a remoting frame: JSON (type 0) and ROCKETMQ binary (type 1).

JSON header (what RocketMQ's ``RemotingSerializable`` writes)::

    {"code": 105, "language": "PYTHON", "version": 0, "opaque": 7, "flag": 0,
     "remark": "...", "extFields": {"topic": "orders"}, "serializeTypeCurrentRPC": "JSON"}

``language`` is a ``LanguageCode`` name (a number is accepted too); ``remark`` may be absent
or null. ``extFields`` values are strings, but some clients (ali-ons) send raw JSON numbers
or booleans: numbers become their decimal text, booleans ``"true"``/``"false"``, nulls are
dropped; an object or array value is a frame error.

ROCKETMQ binary header (``RocketMQSerializable``), all integers big-endian, text UTF-8::

    offset  size  field
    0       2     code        int16
    2       1     language    int8 (LanguageCode)
    3       2     version     int16
    5       4     opaque      int32
    9       4     flag        int32
    13      4     remark_len  int32, then remark_len bytes of remark
    ..      4     ext_len     int32, then ext_len bytes of entries:
                    key_len int16 | key | value_len int32 | value   (repeated)
"""

from __future__ import annotations

import json
import struct
from typing import Any

from broker_core.errors import RemotingFrameError
from broker_core.remoting.codes import LanguageCode
from broker_core.remoting.command import RemotingCommand

BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")

_LANGUAGE_BY_NAME = {member.name: int(member) for member in LanguageCode}


# ---- JSON ---------------------------------------------------------------------------------


def encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "language": _language_name(cmd.language),
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "extFields": cmd.ext_fields,
        "serializeTypeCurrentRPC": "JSON",
    }
    if cmd.remark:
        header["remark"] = cmd.remark
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()


def decode_json_header(data: bytes, body: bytes) -> RemotingCommand:
    """Parse a JSON header; raises ``RemotingFrameError`` naming what is wrong."""
    try:
        header = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemotingFrameError(f"header is not JSON: {exc}") from None
    except RecursionError:
        raise RemotingFrameError("header is not JSON we accept: nested too deeply") from None
    if not isinstance(header, dict):
        raise RemotingFrameError(f"header is not a JSON object: {type(header).__name__}")
    remark = header.get("remark")
    return RemotingCommand(
        code=_int_field(header, "code", required=True),
        language=_language_code(header.get("language")),
        version=_int_field(header, "version"),
        opaque=_int_field(header, "opaque"),
        flag=_int_field(header, "flag"),
        remark="" if remark is None else str(remark),
        ext_fields=_ext_fields(header.get("extFields")),
        body=body,
    )


def _int_field(header: dict[str, Any], name: str, *, required: bool = False) -> int:
    value = header.get(name)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise RemotingFrameError(f"header field {name!r} is not an integer: {value!r}")
    return value


_NAME_BY_LANGUAGE = {int(member): member.name for member in LanguageCode}


def _language_name(code: int) -> str:
    return _NAME_BY_LANGUAGE.get(code, LanguageCode.OTHER.name)  # no enum per call


def _language_code(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    return LanguageCode.OTHER


def _ext_fields(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RemotingFrameError(f"extFields is not a JSON object: {type(raw).__name__}")
    if all(type(value) is str for value in raw.values()):  # the usual case: as it is
        return raw
    fields: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, bool):
            fields[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            fields[key] = str(value)
        else:
            raise RemotingFrameError(f"extFields[{key!r}] is not a string or number")
    return fields


# ---- ROCKETMQ binary -----------------------------------------------------------------------


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    """Raises ``RemotingFrameError`` if a value does not fit its field (e.g. a code > 32767,
    which Java would silently truncate)."""
    remark = cmd.remark.encode()
    try:
        entries = []
        for key, value in cmd.ext_fields.items():
            k, v = key.encode(), value.encode()
            entries += [INT16.pack(len(k)), k, INT32.pack(len(v)), v]
        ext = b"".join(entries)
        fixed = BINARY_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)
    except struct.error as exc:
        raise RemotingFrameError(f"command does not fit a binary header: {exc}") from None
    return b"".join([fixed, INT32.pack(len(remark)), remark, INT32.pack(len(ext)), ext])


def decode_binary_header(data: bytes, body: bytes) -> RemotingCommand:
    """Parse a ROCKETMQ binary header; raises ``RemotingFrameError`` on any bad length."""
    try:
        code, language, version, opaque, flag = BINARY_FIXED.unpack_from(data, 0)
        remark, pos = _read_blob(data, BINARY_FIXED.size, "remark")
        ext, pos = _read_blob(data, pos, "extFields")
        if pos != len(data):
            raise RemotingFrameError(f"binary header has {len(data) - pos} trailing bytes")
        return RemotingCommand(
            code=code,
            language=language,
            version=version,
            opaque=opaque,
            flag=flag,
            remark=remark.decode(),
            ext_fields=_decode_ext_entries(ext),
            body=body,
        )
    except struct.error as exc:
        raise RemotingFrameError(f"binary header is truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RemotingFrameError(f"binary header text is not UTF-8: {exc}") from None


def _read_blob(data: bytes, pos: int, what: str) -> tuple[bytes, int]:
    (length,) = INT32.unpack_from(data, pos)
    pos += INT32.size
    if length < 0 or pos + length > len(data):
        raise RemotingFrameError(f"binary header {what} length {length} overruns the header")
    return data[pos : pos + length], pos + length


def _decode_ext_entries(ext: bytes) -> dict[str, str]:
    fields: dict[str, str] = {}
    pos = 0
    while pos < len(ext):
        (key_len,) = INT16.unpack_from(ext, pos)
        pos += INT16.size
        if key_len < 0 or pos + key_len > len(ext):
            raise RemotingFrameError(f"extFields key length {key_len} overruns the header")
        key = ext[pos : pos + key_len].decode()
        value, pos = _read_blob(ext, pos + key_len, f"extFields[{key!r}]")
        fields[key] = value.decode()
    return fields
