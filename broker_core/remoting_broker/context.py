"""What every remoting handler gets: the broker, its name and address, the client sessions."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core.broker.broker import Broker
from broker_core.namesrv.wire import field_int, field_str
from broker_core.remoting_broker.sessions import RemotingSessions

__all__ = ["RemotingContext", "field_bool", "field_int", "field_str"]


@dataclass
class RemotingContext:
    """Shared by the handlers of one remoting listener."""

    broker: Broker
    broker_name: str
    address: str = ""  # host:port of the listener, set once it is bound
    sessions: RemotingSessions = field(default_factory=RemotingSessions)

    @property
    def host_port(self) -> tuple[str, int]:
        """The listener's address as (host, port), for records' STOREHOST."""
        host, _, port = self.address.rpartition(":")
        return host, int(port) if port.isdigit() else 0


def field_bool(fields: dict[str, str], key: str, default: bool = False) -> bool:
    """A boolean header field: ``"true"`` (any case) or ``"1"`` (the C++ client's form) is
    true, anything else false; absent -> ``default``."""
    text = fields.get(key)
    return default if text is None else text.strip().lower() in ("true", "1")
