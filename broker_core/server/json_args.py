"""Argument parsing for our JSON-over-gRPC services (``rmq.admin.v1.Admin``, Bulk PullRaw).

A request is one UTF-8 JSON object; :func:`parse_request` decodes it (empty means ``{}``)
and :class:`Args` checks its fields against what the method accepts and hands them out
typed. Every problem is an InvalidArgumentError (BAD_REQUEST) naming the method and the
field. :func:`status_json` is a status as these services answer it; a :class:`Verb` is
one method of such a service, as the verb modules under ``handlers/`` declare them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from broker_core.server.context import ServerContext

Json = dict[str, Any]


class Args:
    """A request's fields, checked against what the method accepts.

    Construction raises InvalidArgumentError (BAD_REQUEST) for fields the method does
    not know; the getters raise it for a missing required field or a wrong type.
    """

    def __init__(self, method: str, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            accepted = ", ".join(sorted(allowed)) or "no fields"
            raise InvalidArgumentError(f"{method}: unknown field(s) {unknown}; accepts {accepted}")
        self.method = method
        self.data = dict(data)

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def _get(self, name: str, kinds: tuple[type, ...], what: str, required: bool) -> Any:
        value = self.data.get(name)
        if value is None:
            if required:
                raise InvalidArgumentError(f"{self.method}: field {name!r} is required")
            return None
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise InvalidArgumentError(f"{self.method}: {name!r} must be {what}, got {value!r}")
        return value

    @overload
    def text(self, name: str, *, required: Literal[True]) -> str: ...
    @overload
    def text(self, name: str, *, required: bool = False) -> str | None: ...
    def text(self, name: str, *, required: bool = False) -> str | None:
        """The string field ``name`` (None when absent and not required)."""
        value: str | None = self._get(name, (str,), "a string", required)
        return value

    @overload
    def integer(self, name: str, *, required: Literal[True], minimum: int | None = None) -> int: ...
    @overload
    def integer(
        self, name: str, *, required: bool = False, minimum: int | None = None
    ) -> int | None: ...
    def integer(
        self, name: str, *, required: bool = False, minimum: int | None = None
    ) -> int | None:
        """The integer field ``name`` (not a bool), at least ``minimum`` when given."""
        value: int | None = self._get(name, (int,), "an integer", required)
        if value is not None and minimum is not None and value < minimum:
            raise InvalidArgumentError(f"{self.method}: {name!r} must be >= {minimum}")
        return value

    def flag(self, name: str) -> bool | None:
        """The boolean field ``name`` (None when absent)."""
        value: bool | None = self._get(name, (bool,), "true or false", False)
        return value

    def obj(self, name: str) -> Json | None:
        """The JSON object field ``name`` (None when absent)."""
        value: Json | None = self._get(name, (dict,), "an object", False)
        return value


def parse_request(method: str, raw: bytes) -> Mapping[str, Any]:
    """Decode a request body: empty means ``{}``; anything but a JSON object is refused."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgumentError(f"{method}: request is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{method}: request must be a JSON object, got {data!r:.60}")
    return data


def status_json(status: pb.Status) -> Json:
    """A protobuf ``Status`` as the JSON services answer it: ``{"code", "message"}``."""
    return {"code": int(status.code), "message": status.message}


class Verb(NamedTuple):
    """One method of a JSON service: its function, the fields it accepts, and whether it
    changes the broker's state (the admin service audits those calls)."""

    function: Callable[[ServerContext, Args], Any]
    fields: frozenset[str]
    change: bool = False
