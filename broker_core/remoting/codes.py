"""Remoting request, response and language codes (values from Apache RocketMQ).

Only the codes this project speaks or answers are listed; the values are RocketMQ's own
(``RequestCode.java``, ``ResponseCode.java``, ``RemotingSysResponseCode.java``,
``LanguageCode.java``), so 4.x tools and clients understand them.
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    """Request codes (``RemotingCommand.code`` of a request)."""

    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    BROKER_HEARTBEAT = 904


class ResponseCode(IntEnum):
    """Response codes (``RemotingCommand.code`` of a response)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TOPIC_NOT_EXIST = 17


class LanguageCode(IntEnum):
    """``LanguageCode``: a byte in ROCKETMQ binary headers, the name in JSON headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    """The high byte of a frame's header-length word."""

    JSON = 0
    ROCKETMQ = 1
