"""One table from our errors to ``apache.rocketmq.v2.Code``, and status helpers.

Every handler answers a failure with a response whose ``status`` carries the code below
and the error's message; nothing else decides codes. Unknown exceptions become
INTERNAL_ERROR (and are logged with their traceback by the service wrapper).
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import errors as e

Code = pb.Code

# Most specific first: the first class an error is an instance of decides its code.
ERROR_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (e.InvalidTopicError, Code.ILLEGAL_TOPIC),
    (e.InvalidGroupError, Code.ILLEGAL_CONSUMER_GROUP),
    (e.MessageTooLargeError, Code.MESSAGE_BODY_TOO_LARGE),
    (e.PropertiesTooLargeError, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    (e.InvalidTagError, Code.ILLEGAL_MESSAGE_TAG),
    (e.InvalidKeyError, Code.ILLEGAL_MESSAGE_KEY),
    (e.InvalidMessageGroupError, Code.ILLEGAL_MESSAGE_GROUP),
    (e.InvalidPropertyError, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (e.InvalidMessageIdError, Code.ILLEGAL_MESSAGE_ID),
    (e.EmptyBodyError, Code.MESSAGE_BODY_EMPTY),
    (e.InvalidLiteTopicError, Code.ILLEGAL_LITE_TOPIC),
    (e.LiteQuotaExceededError, Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED),
    (e.MessageTypeConflictError, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (e.MessageCorruptedError, Code.MESSAGE_CORRUPTED),
    (e.InvalidTransactionIdError, Code.INVALID_TRANSACTION_ID),
    (e.FilterSyntaxError, Code.ILLEGAL_FILTER_EXPRESSION),
    (e.InvalidOffsetError, Code.ILLEGAL_OFFSET),
    (e.InvalidReceiptHandleError, Code.INVALID_RECEIPT_HANDLE),
    (e.ConfigError, Code.BAD_REQUEST),
    (e.InvalidArgumentError, Code.BAD_REQUEST),
    (e.TopicNotFoundError, Code.TOPIC_NOT_FOUND),
    (e.GroupNotFoundError, Code.CONSUMER_GROUP_NOT_FOUND),
    (e.MessageNotFoundError, Code.MESSAGE_NOT_FOUND),
    (e.NotFoundError, Code.NOT_FOUND),
    (e.NotMasterError, Code.FORBIDDEN),
    (e.UnauthorizedError, Code.UNAUTHORIZED),
    (e.PermissionDeniedError, Code.FORBIDDEN),
    (e.ConflictError, Code.PRECONDITION_FAILED),
    (e.OffsetOutOfRangeError, Code.ILLEGAL_OFFSET),
    (e.StaleReceiptHandleError, Code.INVALID_RECEIPT_HANDLE),
    (e.QueueLockedError, Code.FORBIDDEN),
    (e.UnsupportedError, Code.UNSUPPORTED),
    (e.BrokerNotReachableError, Code.PROXY_TIMEOUT),
    (e.BusyError, Code.TOO_MANY_REQUESTS),
    (e.DiskFullError, Code.TOO_MANY_REQUESTS),
    (e.FlushTimeoutError, Code.MASTER_PERSISTENCE_TIMEOUT),
    (e.ReplicationTimeoutError, Code.SLAVE_PERSISTENCE_TIMEOUT),
    (e.InSyncReplicasNotEnoughError, Code.HA_NOT_AVAILABLE),
    (e.CorruptionError, Code.MESSAGE_CORRUPTED),
    (e.StoreClosedError, Code.HA_NOT_AVAILABLE),
    (e.StoreError, Code.INTERNAL_SERVER_ERROR),
)


def code_of(exc: BaseException) -> int:
    for cls, code in ERROR_CODES:
        if isinstance(exc, cls):
            return int(code)
    return int(Code.INTERNAL_ERROR)


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=Code.OK, message=message)


def status_of(exc: BaseException) -> pb.Status:
    """The wire status for an exception: its code and a message a user can act on."""
    code = code_of(exc)
    text = str(exc) or type(exc).__name__
    if code == Code.INTERNAL_ERROR:
        text = f"internal error ({type(exc).__name__}): {text}"
    return pb.Status(code=code, message=text)


def bad_request(message: str) -> pb.Status:
    return pb.Status(code=Code.BAD_REQUEST, message=message)
