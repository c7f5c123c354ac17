"""FIFO queue selection: every message of one message group goes to one queue."""

from __future__ import annotations

import hashlib

from broker_core.errors import InvalidArgumentError


def message_group_hash(message_group: str) -> int:
    """Return a stable unsigned 64-bit hash of ``message_group``.

    BLAKE2b (8-byte digest, big-endian) of the UTF-8 bytes: identical on every
    process, platform and Python version, unlike the salted built-in ``hash()``.
    """
    return int.from_bytes(hashlib.blake2b(message_group.encode("utf-8"), digest_size=8).digest())


def queue_for_message_group(message_group: str, queue_count: int) -> int:
    """Return the queue id in ``0..queue_count - 1`` for ``message_group``.

    The same group and count always give the same queue. Raises
    InvalidArgumentError if ``message_group`` is not a non-empty string or
    ``queue_count`` is not an int >= 1.
    """
    if not isinstance(message_group, str) or not message_group:
        raise InvalidArgumentError(
            f"message_group must be a non-empty string, got {message_group!r}"
        )
    if isinstance(queue_count, bool) or not isinstance(queue_count, int) or queue_count < 1:
        raise InvalidArgumentError(f"queue_count must be an int >= 1, got {queue_count!r}")
    return message_group_hash(message_group) % queue_count
