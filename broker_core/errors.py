"""One exception tree for the whole broker.

Every error a caller can act on is a subclass of :class:`RocketMQError`. The gRPC
layer maps classes to ``apache.rocketmq.v2.Code`` values in one table, so each
class here names a distinct situation, never a generic "something failed".

::

    RocketMQError                       retriable = False unless noted
    ├── InvalidArgumentError            the caller sent something malformed
    │   ├── InvalidTopicError           bad topic name
    │   ├── InvalidGroupError           bad consumer/producer group name
    │   ├── MessageTooLargeError        body over max_body_bytes
    │   ├── PropertiesTooLargeError     encoded properties over the limit
    │   ├── InvalidPropertyError        forbidden characters in a property
    │   │   ├── InvalidTagError             a bad tag
    │   │   ├── InvalidKeyError             a bad message key
    │   │   └── InvalidMessageGroupError    a bad message group
    │   ├── InvalidMessageIdError       missing or malformed message id
    │   ├── EmptyBodyError              a message without a body
    │   ├── MessageTypeConflictError    declared type disagrees with the message's fields
    │   ├── MessageCorruptedError       body digest mismatch, undecodable body
    │   ├── InvalidTransactionIdError   transaction id missing or not the half's
    │   ├── FilterSyntaxError           tag or SQL92 expression does not parse
    │   ├── InvalidOffsetError          offset negative or otherwise meaningless
    │   ├── InvalidReceiptHandleError   receipt handle does not decode
    │   └── ConfigError                 a configuration value is invalid
    ├── NotFoundError
    │   ├── TopicNotFoundError
    │   ├── GroupNotFoundError
    │   └── MessageNotFoundError
    ├── PermissionDeniedError           topic perm forbids the operation
    ├── OffsetOutOfRangeError           read below the minimum / above the maximum
    ├── StaleReceiptHandleError         handle superseded, acked, or expired
    ├── UnsupportedError                a feature we deliberately do not offer
    ├── StoreError
    │   ├── CorruptionError             bad bytes in a file (names file and position)
    │   ├── StoreClosedError            the store is shut down
    │   ├── StoreLockedError            another process holds the store directory
    │   ├── DiskFullError               retriable: no room for the append
    │   └── FlushTimeoutError           retriable: sync flush did not finish in time
    └── BusyError                       retriable: flow control, try again later
"""

from __future__ import annotations


class RocketMQError(Exception):
    """Base of every error raised by broker_core on purpose."""

    retriable: bool = False


class InvalidArgumentError(RocketMQError):
    """The request or value is malformed; retrying the same input cannot help."""


class InvalidTopicError(InvalidArgumentError):
    """A topic name breaks the naming rules."""


class InvalidGroupError(InvalidArgumentError):
    """A group name breaks the naming rules."""


class MessageTooLargeError(InvalidArgumentError):
    """A message body exceeds the configured maximum."""


class PropertiesTooLargeError(InvalidArgumentError):
    """Encoded message properties exceed the configured maximum."""


class InvalidPropertyError(InvalidArgumentError):
    """A property name or value contains characters the codec reserves."""


class InvalidTagError(InvalidPropertyError):
    """A message tag is blank, too long, or contains reserved characters."""


class InvalidKeyError(InvalidPropertyError):
    """A message key is blank, too long, or contains reserved characters."""


class InvalidMessageGroupError(InvalidPropertyError):
    """A message group (FIFO) is blank, too long, or contains reserved characters."""


class InvalidMessageIdError(InvalidArgumentError):
    """A message id is missing or malformed."""


class EmptyBodyError(InvalidArgumentError):
    """A message has an empty body."""


class MessageTypeConflictError(InvalidArgumentError):
    """The declared message type conflicts with the message (group, delivery time)."""


class MessageCorruptedError(InvalidArgumentError):
    """A message arrived damaged: its body digest does not match, or it does not decode."""


class InvalidTransactionIdError(InvalidArgumentError):
    """A transaction id is missing or does not belong to the half message."""


class FilterSyntaxError(InvalidArgumentError):
    """A tag or SQL92 filter expression could not be parsed."""


class InvalidOffsetError(InvalidArgumentError):
    """An offset is negative or otherwise meaningless."""


class InvalidReceiptHandleError(InvalidArgumentError):
    """A receipt handle cannot be decoded."""


class ConfigError(InvalidArgumentError):
    """A configuration value is missing, unknown or out of range."""


class NotFoundError(RocketMQError):
    """The named resource does not exist."""


class TopicNotFoundError(NotFoundError):
    """The topic does not exist (and auto-creation is off or not allowed)."""


class GroupNotFoundError(NotFoundError):
    """The consumer group does not exist."""


class MessageNotFoundError(NotFoundError):
    """No message matches the id, key or offset asked for."""


class PermissionDeniedError(RocketMQError):
    """The topic's permission forbids this operation (e.g. write to a read-only topic)."""


class AccessDeniedError(PermissionDeniedError):
    """The ACL does not allow this user the action on the resource (or a Deny rule
    forbids it)."""


class UnauthorizedError(RocketMQError):
    """The request is not signed by a known user: a missing, malformed, stale or wrong
    ``authorization`` signature, or an unknown access key."""


class OffsetOutOfRangeError(RocketMQError):
    """A read asked for an offset outside ``[min_offset, max_offset]``."""

    def __init__(self, message: str, *, min_offset: int, max_offset: int) -> None:
        super().__init__(message)
        self.min_offset = min_offset
        self.max_offset = max_offset


class StaleReceiptHandleError(RocketMQError):
    """The receipt handle was superseded, already acked, or its message redelivered."""


class UnsupportedError(RocketMQError):
    """The operation is recognised but deliberately not supported."""


class StoreError(RocketMQError):
    """A failure inside the message store."""


class CorruptionError(StoreError):
    """Bytes on disk do not decode or fail their checksum."""

    def __init__(self, message: str, *, path: str = "", position: int = -1) -> None:
        where = f" ({path} at byte {position})" if path else ""
        super().__init__(message + where)
        self.path = path
        self.position = position


class StoreClosedError(StoreError):
    """The store has been shut down."""


class StoreLockedError(StoreError):
    """Another broker process holds the store directory's lock."""


class DiskFullError(StoreError):
    """The disk has no room for the append; nothing was written."""

    retriable = True


class FlushTimeoutError(StoreError):
    """A sync-flush append was written but not confirmed durable in time."""

    retriable = True


class BusyError(RocketMQError):
    """The broker is shedding load (flush or dispatch lag, disk nearly full)."""

    retriable = True
