"""A fixed-size record that ends in the CRC32 of its other bytes: the timer files' shape.

The timer log (``log.py``, 36-byte records) and the timing wheel (``wheel.py``, 32-byte
slots) both store big-endian ``struct`` records whose last field is a ``uint32`` CRC32 of
every byte before it. :class:`CrcRecord` is that shape, written once: ``pack`` fills the
CRC in, ``unpack`` checks it (and the length) and raises CorruptionError naming the file
and position, never returning a record it could not verify.

Byte layout of a record of fields ``F`` (``F`` is the caller's, declared and documented
where the file's format is)::

    offset      size  field   type    meaning
    0           n     F       …       the record's fields, big-endian
    n           4     crc32   uint32  CRC32 of bytes 0..n-1

>>> pair = CrcRecord("qi")  # an int64 and an int32
>>> raw = pair.pack(7, -1)
>>> len(raw), pair.unpack(raw, what="pair")
(16, (7, -1))
>>> pair.unpack(raw[:-1] + b"x", what="pair")
Traceback (most recent call last):
...
broker_core.errors.CorruptionError: pair fails its checksum
"""

from __future__ import annotations

import struct
import zlib

from broker_core.errors import CorruptionError

_CRC = struct.Struct(">I")


class CrcRecord:
    """Big-endian ``struct`` fields followed by the CRC32 of their bytes (see above)."""

    def __init__(self, fields: str) -> None:
        self.struct = struct.Struct(">" + fields + "I")
        self.size = self.struct.size  # bytes of one record, CRC included
        self._body = self.size - _CRC.size

    def pack(self, *values: int) -> bytes:
        """The record of ``values`` (every field but the CRC), its CRC filled in."""
        body = self.struct.pack(*values, 0)[: self._body]
        return body + _CRC.pack(zlib.crc32(body))

    def unpack(
        self, raw: bytes, *, what: str, path: str = "", position: int = -1
    ) -> tuple[int, ...]:
        """The fields of ``raw`` (without the CRC) once its length and CRC verify, else
        CorruptionError ("``what`` fails its checksum") at ``path``/``position``."""
        if len(raw) != self.size:
            raise CorruptionError(f"{what} is {len(raw)} bytes", path=path, position=position)
        *values, crc = self.struct.unpack(raw)
        if crc != zlib.crc32(raw[: self._body]):
            raise CorruptionError(f"{what} fails its checksum", path=path, position=position)
        return tuple(values)
