"""``RemotingCommand``: one request or response of RocketMQ's TCP remoting protocol.

A command is plain data; :mod:`broker_core.remoting.frame` turns it into bytes and back.
``flag`` bit 0 marks a response (``RPC_TYPE``), bit 1 a oneway request (``RPC_ONEWAY``);
``opaque`` is the request id a response echoes; a response goes out in the header
encoding its request came in (``serialize_type``). ``ext_fields`` carries the "custom header"
of each request type as strings (``{"topic": "t"}``, ``{"brokerId": "0"}``).

Example::

    req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    resp = req.response(ResponseCode.TOPIC_NOT_EXIST, remark="no route for orders")
    assert resp.is_response and resp.opaque == req.opaque
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from broker_core.remoting.codes import LanguageCode, ResponseCode, SerializeType

RPC_TYPE_RESPONSE = 1 << 0
RPC_ONEWAY = 1 << 1

# Our requests carry version 0: a Java name server would then answer in fastjson's
# non-standard JSON unless asked otherwise, so route requests send ``acceptStandardJsonOnly``.
DEFAULT_VERSION = 0

_opaques = itertools.count(1)


def next_opaque() -> int:
    """A process-wide request id (thread-safe: ``itertools.count`` is atomic under the GIL)."""
    return next(_opaques) & 0x7FFFFFFF


@dataclass(slots=True)
class RemotingCommand:
    """One remoting request or response (see the module docstring for the fields)."""

    code: int
    language: int = LanguageCode.PYTHON
    version: int = DEFAULT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str = ""
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: int = SerializeType.JSON  # the header encoding it arrived in / goes out in

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A new request with a fresh ``opaque``."""
        flag = RPC_ONEWAY if oneway else 0
        fields = dict(ext_fields or {})
        return cls(code=int(code), opaque=next_opaque(), flag=flag, ext_fields=fields, body=body)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        *,
        remark: str = "",
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same ``opaque``, the response flag set."""
        return RemotingCommand(
            code=int(code),
            version=self.version,
            opaque=self.opaque,
            flag=RPC_TYPE_RESPONSE,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
            serialize_type=self.serialize_type,
        )

    def with_opaque(self, opaque: int) -> RemotingCommand:
        return replace(self, opaque=opaque)
