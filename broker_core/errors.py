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
    │   ├── ConfigError                 a configuration value is invalid
    │   └── StaleRegistrationError      a broker claims a live broker id with an older data version
    ├── NotFoundError
    │   ├── TopicNotFoundError
    │   ├── GroupNotFoundError
    │   └── MessageNotFoundError
    ├── PermissionDeniedError           topic perm forbids the operation
    │   └── NotMasterError              a write sent to a slave of a broker group
    ├── OffsetOutOfRangeError           read below the minimum / above the maximum
    ├── StaleReceiptHandleError         handle superseded, acked, or expired
    ├── QueueLockedError                retriable: another client holds the queue's lock
    ├── UnsupportedError                a feature we deliberately do not offer
    │   └── ServiceNotOfferedError      the endpoint has no such gRPC service or method
    │                                   (UNIMPLEMENTED: e.g. a broker without our extensions)
    ├── BrokerNotReachableError         retriable: a call for another broker of the
    │                                   cluster could not be forwarded there
    ├── StoreError
    │   ├── CorruptionError             bad bytes in a file (names file and position)
    │   ├── StoreClosedError            the store is shut down
    │   ├── StoreLockedError            another process holds the store directory
    │   ├── DiskFullError               retriable: no room for the append
    │   ├── FlushTimeoutError           retriable: sync flush did not finish in time
    │   ├── ReplicationTimeoutError     retriable: the in-sync slaves did not ack in time
    │   ├── InSyncReplicasNotEnoughError retriable: fewer in-sync replicas than the minimum
    │   └── ReplicationProtocolError    bad bytes or offsets on the HA port (that link closes)
    ├── ConflictError                   clashes with what exists (asks for update/force)
    ├── ServerError                     the broker process could not start or stop cleanly
    │   └── ListenError                 the listen address cannot be bound
    ├── BusyError                       retriable: flow control, try again later
    └── RemotingError                   the TCP remoting protocol (NameServer, 4.x clients)
        ├── RemotingFrameError          a malformed frame: bad length, header not JSON, oversize
        ├── RemotingConnectError        retriable: cannot connect, or the connection broke
        ├── RemotingTimeoutError        retriable: no response within the timeout
        └── RemotingCommandError        the peer answered with an error code (``.code``)
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


class InvalidLiteTopicError(InvalidArgumentError):
    """A lite topic name that is blank, too long or has characters outside [a-zA-Z0-9_-]."""


class LiteQuotaExceededError(RocketMQError):
    """A client asked to subscribe to more lite topics than its quota allows."""


class MessageTypeConflictError(InvalidArgumentError):
    """The declared message type conflicts with the message (group, delivery time)."""


class MessageCorruptedError(InvalidArgumentError):
    """A message arrived damaged: its body digest does not match, or it does not decode."""


class InvalidTransactionIdError(InvalidArgumentError):
    """A transaction id is missing or does not belong to the half message."""


class FilterSyntaxError(InvalidArgumentError):
    """A tag or SQL92 filter expression could not be parsed."""


class InvalidOffsetError(InvalidArgumentError):
    """An offset is negative or otherwise meaningless.

    ``next_offset``: where the broker said to read instead (the queue's minimum after
    retention, or its end), when a pull refused the offset and the answer named one.
    """

    def __init__(self, message: str = "", *, next_offset: int | None = None) -> None:
        super().__init__(message)
        self.next_offset = next_offset


class InvalidReceiptHandleError(InvalidArgumentError):
    """A receipt handle cannot be decoded."""


class ConfigError(InvalidArgumentError):
    """A configuration value is missing, unknown or out of range."""


class StaleRegistrationError(InvalidArgumentError):
    """A broker registration claims a broker id held by another address with a newer version."""


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


class NotMasterError(PermissionDeniedError):
    """A client write reached a slave: only a broker group's master takes writes."""


class UnsupportedError(RocketMQError):
    """The operation is recognised but deliberately not supported."""


class ServiceNotOfferedError(UnsupportedError):
    """The endpoint answered gRPC UNIMPLEMENTED: it serves no such service or method
    (a RocketMQ 5 proxy, or our broker started with ``--no-extensions``)."""


class BrokerNotReachableError(RocketMQError):
    """A call that belongs to another broker of the cluster could not be forwarded to
    it (unknown, dead, or reached through a forwarded call); the message names it."""

    retriable = True


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


class QueueLockedError(RocketMQError):
    """An orderly consumer does not hold the queue lock: another client of its group does.

    Retriable: the lock expires when its holder stops refreshing it.
    """

    retriable = True


class ConflictError(RocketMQError):
    """The request clashes with existing state: a topic that exists with other settings,
    or a change that would hide messages, without the explicit update/force asked for."""


class ServerError(RocketMQError):
    """The broker process could not start or stop cleanly (the message says which step)."""


class ListenError(ServerError):
    """The server cannot bind its listen address (in use, not local, or unresolvable)."""


class BusyError(RocketMQError):
    """The broker is shedding load (flush or dispatch lag, disk nearly full)."""

    retriable = True


class RemotingError(RocketMQError):
    """A failure of the TCP remoting protocol (frames, connections, peers' error codes)."""


class RemotingFrameError(RemotingError):
    """Bytes on a remoting connection do not form a valid frame; the connection is closed."""


class RemotingConnectError(RemotingError):
    """The peer cannot be reached, or the connection broke before the response arrived."""


class ReplicationTimeoutError(StoreError):
    """A sync-replication append was stored on the master but the in-sync slaves did not
    ack it in time (RocketMQ's FLUSH_SLAVE_TIMEOUT); the message may still be replicated."""

    retriable = True


class RemotingTimeoutError(RemotingError):
    """No response arrived within the timeout; the request may or may not have been served."""


class InSyncReplicasNotEnoughError(StoreError):
    """Sync replication needs more in-sync replicas than the group has now
    (RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH); nothing was appended."""

    retriable = True


class RemotingCommandError(RemotingError):
    """The peer answered a request with a non-success response code."""

    def __init__(self, message: str, *, code: int, remark: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark


class ReplicationProtocolError(StoreError):
    """Bytes on the HA port break the replication protocol (a gap, an overlap that
    differs, a unit that does not verify, a bad frame); the link is closed."""


class MasterFencedError(ReplicationTimeoutError):
    """Controller mode: the master could not renew its lease in time (or lost its term),
    so it acknowledges nothing; the message may be stored and is not acknowledged."""


class ControllerError(ServerError):
    """Controller mode: etcd could not be reached or answered something unusable."""
