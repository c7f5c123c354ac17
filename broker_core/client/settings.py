"""What every connection of a client is made with: timeouts, retries, identity, TLS, keys.

One frozen :class:`ClientSettings` is shared by the parts of a
:class:`~broker_core.client.broker_client.BrokerClient` and by every broker client a
:class:`~broker_core.client.cluster.ClusterClient` opens, so a cluster's connections all
behave alike. It is checked once, when made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_core.address import parse_host_port
from broker_core.client.in_flight import DEFAULT_MAX_IN_FLIGHT
from broker_core.errors import InvalidArgumentError


def parse_endpoint(endpoints: str) -> str:
    """``host:port`` from ``"host:port"`` (a ``;``/``,`` list uses its first entry)."""
    first = endpoints.replace(",", ";").split(";")[0].strip()
    for prefix in ("http://", "https://", "dns:///", "ipv4:"):
        first = first.removeprefix(prefix)
    parse_host_port(first, what=f"endpoint {endpoints!r}")  # port 1..65535, else raises
    return first


@dataclass(frozen=True)
class ClientSettings:
    """A client's connection settings (see ``RocketMQClient`` for each one's meaning).

    ``secret_key`` signs requests and is never shown (``repr=False``); ``tls`` is on when
    asked for or when any TLS file is given.
    """

    timeout_s: float = 10.0
    client_id: str | None = None
    max_attempts: int = 3
    retry_backoff_s: float = 0.1
    namespace: str = ""
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    bulk: bool = True
    coalesce: bool = False

    def __post_init__(self) -> None:
        if (
            self.timeout_s <= 0
            or self.max_attempts < 1
            or self.retry_backoff_s < 0
            or self.max_in_flight < 1
        ):
            raise InvalidArgumentError(
                "timeout_s > 0, max_attempts >= 1, retry_backoff_s >= 0, max_in_flight >= 1"
            )
        if bool(self.access_key) != bool(self.secret_key):
            raise InvalidArgumentError("give both access_key and secret_key, or neither")
        object.__setattr__(self, "access_key", self.access_key or None)
        object.__setattr__(self, "secret_key", self.secret_key or None)
        tls = self.tls or self.ca_file is not None or self.cert_file is not None
        object.__setattr__(self, "tls", tls)

    @property
    def tls_files(self) -> tuple[str | None, str | None, str | None] | None:
        """(CA, client certificate, client key) when TLS is on, else None."""
        return (self.ca_file, self.cert_file, self.key_file) if self.tls else None
