"""From wire statuses back to our exceptions: ``status.py``'s table, inverted.

Every status code the broker sends comes from ``broker_core.protocol.status.ERROR_CODES``;
:func:`error_for` turns a code and its message back into the most sensible class of
``broker_core.errors`` (several classes share a code, e.g. ILLEGAL_OFFSET comes back as
InvalidOffsetError). gRPC transport failures (broker down, deadline passed) become
:class:`BrokerUnavailableError`, which is retriable.
"""

from __future__ import annotations

from typing import Final

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import errors as e
from broker_core.protocol.status import ERROR_CODES

Code = pb.Code


class BrokerUnavailableError(e.RocketMQError):
    """The broker could not be reached or did not answer in time (retriable)."""

    retriable = True


# Where several classes share a code, the broadest that still says what happened.
_PREFERRED: Final[dict[int, type[e.RocketMQError]]] = {
    Code.BAD_REQUEST: e.InvalidArgumentError,
    Code.ILLEGAL_OFFSET: e.InvalidOffsetError,
    Code.INVALID_RECEIPT_HANDLE: e.InvalidReceiptHandleError,
    Code.TOO_MANY_REQUESTS: e.BusyError,
    Code.INTERNAL_SERVER_ERROR: e.StoreError,
    Code.NOT_IMPLEMENTED: e.UnsupportedError,
    Code.VERSION_UNSUPPORTED: e.UnsupportedError,
    Code.MESSAGE_BODY_EMPTY: e.InvalidArgumentError,
    Code.PAYLOAD_TOO_LARGE: e.MessageTooLargeError,
    Code.ILLEGAL_MESSAGE_TAG: e.InvalidArgumentError,
    Code.ILLEGAL_MESSAGE_KEY: e.InvalidArgumentError,
    Code.ILLEGAL_MESSAGE_GROUP: e.InvalidArgumentError,
    Code.ILLEGAL_DELIVERY_TIME: e.InvalidArgumentError,
    Code.ILLEGAL_MESSAGE_ID: e.InvalidArgumentError,
    Code.INVALID_TRANSACTION_ID: e.InvalidArgumentError,
    Code.CLIENT_ID_REQUIRED: e.InvalidArgumentError,
    Code.OFFSET_NOT_FOUND: e.NotFoundError,
    Code.PROXY_TIMEOUT: e.FlushTimeoutError,
    Code.FORBIDDEN: e.PermissionDeniedError,
}


def _table() -> dict[int, type[e.RocketMQError]]:
    table: dict[int, type[e.RocketMQError]] = {}
    for cls, code in ERROR_CODES:
        if issubclass(cls, e.RocketMQError) and cls is not e.OffsetOutOfRangeError:
            table.setdefault(int(code), cls)
    table.update({int(code): cls for code, cls in _PREFERRED.items()})
    return table


CODE_ERRORS: Final = _table()


def error_for(code: int, message: str, *, next_offset: int | None = None) -> e.RocketMQError:
    """The exception for a non-OK status; unknown codes become a plain RocketMQError.
    ``next_offset`` (a pull's answer) goes to an InvalidOffsetError's field."""
    cls = CODE_ERRORS.get(int(code), e.RocketMQError)
    name = Code.Name(code) if code in Code.values() else str(code)
    text = f"{message} [{name}]"
    error = (
        cls(text, next_offset=next_offset) if issubclass(cls, e.InvalidOffsetError) else cls(text)
    )
    error.code = int(code)  # type: ignore[attr-defined]
    return error


def check(status: pb.Status, *, next_offset: int | None = None) -> None:
    """Raise the mapped error unless ``status`` is OK (MULTIPLE_RESULTS counts as OK);
    ``next_offset`` as :func:`error_for` takes it."""
    if status.code not in (Code.OK, Code.MULTIPLE_RESULTS):
        raise error_for(status.code, status.message or "(no message)", next_offset=next_offset)


# CANCELLED: a stopping server cancels the calls it no longer takes (a broker restarting,
# e.g. into a new controller role); the outcome is unknown, as after a reset
_TRANSPORT_RETRIABLE: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


# gRPC's words when the two ends disagree about TLS, and what to tell the user instead of
# a bare "Socket closed" (the CLI takes TLS from $RMQ_CA_FILE / $RMQ_TLS: client/env.py).
_TLS_HINTS: Final = (
    (
        "WRONG_VERSION_NUMBER",
        "TLS mismatch: TLS was used but the broker does not serve TLS "
        "(connect without TLS: unset RMQ_CA_FILE/RMQ_TLS)",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "TLS: the broker's certificate is not trusted (name its CA: RMQ_CA_FILE=ca.pem)",
    ),
    (
        "BAD_SIGNATURE",
        "TLS: the broker's certificate is not signed by the trusted CA (check RMQ_CA_FILE)",
    ),
    (
        "Socket closed",
        "the broker closed the connection; if it serves TLS, connect with TLS "
        "(RMQ_CA_FILE=ca.pem or RMQ_TLS=true)",
    ),
)


def tls_hint(details: str) -> str:
    """What a transport failure's ``details`` say about TLS, or "" (pure)."""
    return next((hint for words, hint in _TLS_HINTS if words in details), "")


def transport_error(exc: grpc.RpcError, endpoint: str, what: str) -> e.RocketMQError:
    """Our error for a gRPC-level failure of call ``what`` to ``endpoint``."""
    status = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    text = f"{what} to {endpoint} failed: {status.name}: {details}"
    if status in _TRANSPORT_RETRIABLE:
        if status is grpc.StatusCode.UNAVAILABLE:
            hint = tls_hint(details)
            said = f"{hint}: {details}" if hint else details
            text = f"broker at {endpoint} is unreachable ({what}): {said}"
        return BrokerUnavailableError(text)
    if status is grpc.StatusCode.UNIMPLEMENTED:
        return e.ServiceNotOfferedError(text)
    return e.RocketMQError(text)
