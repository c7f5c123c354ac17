"""A broker group's controller state in etcd (``etcd3gw``: etcd's v3 HTTP gateway, sync).

Keys, under ``/rmq/groups/<broker name>/``:

* ``state``: one JSON ``GroupState`` ``{master, epoch, in_sync, set_epoch, epochs}``;
  written only by compare-and-swap on its whole previous value (``cas``), so two
  brokers deciding at once cannot both win.
* ``members/<node>``: each live broker's record (endpoint, HA endpoint, HA link
  address, commitlog end, newest epoch), attached to that broker's lease: when the
  broker stops renewing, etcd deletes it, which is how the group sees it gone.

Several endpoints (``http://h:p,http://h:p``) are tried in turn; a request that fails
on every one raises ControllerError. etcd does the consensus; nothing here votes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import etcd3gw
from etcd3gw.lease import Lease

from broker_core.errors import ConfigError, ControllerError

_PREFIX = "/rmq/groups/"
_TIMEOUT_S = 0.5


@dataclass(slots=True)
class GroupState:
    """Who leads the group. ``epochs``: ``[epoch, start offset]`` of every master term."""

    master: str
    epoch: int
    in_sync: list[str]
    set_epoch: int
    epochs: list[list[int]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> GroupState:
        doc = json.loads(text)
        return cls(
            doc["master"],
            int(doc["epoch"]),
            list(doc["in_sync"]),
            int(doc["set_epoch"]),
            [list(map(int, e)) for e in doc.get("epochs", [])],
        )


def parse_endpoints(urls: str) -> list[tuple[str, int]]:
    """``http://HOST:PORT[,…]`` → [(host, port)]; ConfigError for anything else."""
    out = []
    for url in filter(None, (u.strip() for u in urls.replace(";", ",").split(","))):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ConfigError(f"--controller wants http://HOST:PORT[,…], got {url!r}")
        out.append((parts.hostname, parts.port))
    if not out:
        raise ConfigError("--controller needs at least one etcd endpoint")
    return out


class EtcdGroup:
    """One broker group's keys in etcd (see the module docstring)."""

    def __init__(self, urls: str, group: str) -> None:
        self._clients = [
            etcd3gw.Etcd3Client(host=h, port=p, timeout=_TIMEOUT_S)
            for h, p in parse_endpoints(urls)
        ]
        self._current = 0
        self.group = group
        self._state_key = f"{_PREFIX}{group}/state"
        self._members = f"{_PREFIX}{group}/members/"
        self._ids = f"{_PREFIX}{group}/ids/"

    def _call(self, what: str, fn: Any) -> Any:
        """``fn(client)`` on the endpoints in turn, starting at the last one that worked."""
        errors = []
        for i in range(len(self._clients)):
            idx = (self._current + i) % len(self._clients)
            try:
                result = fn(self._clients[idx])
            except Exception as exc:  # requests and etcd3gw errors alike
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            self._current = idx
            return result
        raise ControllerError(f"etcd: {what} failed on every endpoint: {'; '.join(errors)}")

    # ---- leases and member records --------------------------------------------------------

    def grant(self, ttl_s: int) -> int:
        return int(self._call("lease grant", lambda c: c.lease(ttl_s).id))

    def refresh(self, lease_id: int) -> int:
        """The lease's new TTL in seconds; ≤ 0 when etcd already expired it."""
        return int(self._call("lease keepalive", lambda c: Lease(lease_id, c).refresh()))

    def put_member(self, node: str, record: dict[str, Any], lease_id: int) -> None:
        value = json.dumps(record, sort_keys=True)
        self._call(
            "put member", lambda c: c.put(self._members + node, value, lease=Lease(lease_id, c))
        )

    def members(self) -> dict[str, dict[str, Any]]:
        """Live members' records by node name."""
        rows = self._call("list members", lambda c: c.get_prefix(self._members))
        out = {}
        for value, meta in rows:
            key = meta["key"].decode() if isinstance(meta["key"], bytes) else meta["key"]
            out[key[len(self._members) :]] = json.loads(value)
        return out

    # ---- member ids ---------------------------------------------------------------------------

    def member_id(self, node: str) -> int:
        """``node``'s broker id as a slave: the one it holds, else the next after the highest
        held (≥ 1), claimed by create-if-absent (a race lost to another node moves on)."""
        while True:
            held = self._ids_held()
            for number, holder in held.items():
                if holder == node:
                    return number
            number = 1 + max(held, default=0)
            key = f"{self._ids}{number}"
            if self._call("claim member id", lambda c, k=key: c.create(k, node)):
                return number

    def member_ids(self) -> dict[str, int]:
        """Node name -> the member (broker) id it holds (nodes that never were a slave
        hold none)."""
        return {node: number for number, node in self._ids_held().items()}

    def _ids_held(self) -> dict[int, str]:
        rows = self._call("list member ids", lambda c: c.get_prefix(self._ids))
        out = {}
        for value, meta in rows:
            key = meta["key"].decode() if isinstance(meta["key"], bytes) else meta["key"]
            out[int(key[len(self._ids) :])] = value.decode() if isinstance(value, bytes) else value
        return out

    # ---- the group state --------------------------------------------------------------------

    def state(self) -> tuple[GroupState | None, str]:
        """The state and its exact stored text (the CAS guard); (None, "") when unset."""
        values = self._call("get state", lambda c: c.get(self._state_key))
        if not values:
            return None, ""
        raw = values[0].decode() if isinstance(values[0], bytes) else values[0]
        return GroupState.from_json(raw), raw

    def cas(self, old_raw: str, new: GroupState) -> bool:
        """Write ``new`` only if the stored text is still ``old_raw`` ("" = absent)."""
        text = new.to_json()
        if not old_raw:
            return bool(self._call("create state", lambda c: c.create(self._state_key, text)))
        return bool(self._call("cas state", lambda c: c.replace(self._state_key, old_raw, text)))


GroupView = tuple[GroupState | None, dict[str, dict[str, Any]], dict[str, int]]


def all_groups(urls: str) -> dict[str, GroupView]:
    """Every group under the prefix: its state, live members and the member ids its nodes
    hold (for ``rmq``)."""
    probe = EtcdGroup(urls, "")
    rows = probe._call("list groups", lambda c: c.get_prefix(_PREFIX))
    names = set()
    for _value, meta in rows:
        key = meta["key"].decode() if isinstance(meta["key"], bytes) else meta["key"]
        names.add(key[len(_PREFIX) :].split("/", 1)[0])
    out = {}
    for name in sorted(names):
        group = EtcdGroup(urls, name)
        out[name] = (group.state()[0], group.members(), group.member_ids())
    return out
