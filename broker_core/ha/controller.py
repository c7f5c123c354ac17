"""Controller mode: the group's master is chosen through etcd (``etcd_state``).

A broker with ``--controller`` runs one ``ControllerAgent``:

* ``join`` (before the store opens) takes a lease, publishes its member record and
  waits until its role is known: the group's first broker creates the state with itself
  as master; a broker named master by the state resumes as master; otherwise it becomes
  a slave of the live master after cutting its log at the start of the first epoch it
  does not know (``epoch_log.cut_at``), or, when the master is gone and it is the only
  live in-sync member, elects itself.
* ``attach`` (broker running) starts a loop, every ``LOOP_S``: renew the lease, refresh
  the member record (commitlog end, HA addresses), read the state, then
  - master: its term still holds (same master and epoch) and its in-sync set goes to
    etcd by CAS; sends wait for the *union* of the local in-sync slaves and the set in
    etcd (``InSyncSet.required``), so an ack never counts on a set etcd does not have
    yet (RocketMQ #5663);
  - slave: when the master's record is gone (its lease expired) and this broker is the
    best live in-sync member (newest epoch, then largest commitlog end, then name), it
    stops its HA link and CASes itself in as master with epoch + 1, starting at its
    log end.
  Any change of role or master ends in ``restart``: the process stops cleanly and runs
  again (``server.main``), so the next ``join`` applies it with the store closed.
  The loop is a ``ServiceThread`` (``controller``), listed with the broker's HA threads
  (``Replication.attach_controller``), so health shows it.
* Fencing (``fence``): a master acknowledges a write only while its last successful
  renewal, sent at t, gives ``t + TTL - FENCE_MARGIN_S`` > now; etcd cannot expire the
  lease before ``t + TTL``, so no other master can be elected while this one still acks.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from broker_core.errors import ControllerError, RocketMQError
from broker_core.ha import epoch_log
from broker_core.ha.etcd_state import EtcdGroup, GroupState
from broker_core.ha.group import Replication
from broker_core.service_thread import ServiceThread

log = logging.getLogger(__name__)
LEASE_TTL_S = 2
LOOP_S = 0.2
FENCE_MARGIN_S = 0.6


@dataclass(frozen=True, slots=True)
class Role:
    """What ``join`` decided: broker id (0 = master) and, for a slave, its master's HA."""

    broker_id: int
    ha_master: str
    epoch: int


def _nothing() -> None:
    """Nothing to do after a promotion."""


def _cannot_promote() -> None:
    raise ControllerError("the controller is not attached to a running broker")


def node_name(store_dir: str) -> str:
    """A broker's stable name in its group: host and a digest of its store directory."""
    digest = hashlib.sha1(str(Path(store_dir).resolve()).encode()).hexdigest()[:8]
    return f"{socket.gethostname()}-{digest}"


class ControllerAgent:
    """One broker's part in controller mode (see the module docstring)."""

    def __init__(self, urls: str, group: str, store_dir: str) -> None:
        self.etcd = EtcdGroup(urls, group)
        self.node = node_name(store_dir)
        self.store_dir = Path(store_dir)
        self.role: Role | None = None
        self.restart = threading.Event()
        self.restart_reason = ""
        self._lease = 0
        self._valid_until = 0.0
        self._replication: Replication | None = None
        self._promote: Callable[[], None] = _cannot_promote
        self._on_promoted: Callable[[], None] = _nothing  # e.g. re-register as broker id 0
        self._record: dict[str, Any] = {}
        self.thread = ServiceThread("controller", self._tick, interval_ms=LOOP_S * 1000)
        self.master_endpoint = ""  # the master's gRPC endpoint as last seen in etcd

    # ---- the lease ------------------------------------------------------------------------

    def _renew(self) -> None:
        sent = time.monotonic()
        if not self._lease:
            self._lease = self.etcd.grant(LEASE_TTL_S)
            ttl = LEASE_TTL_S
        else:
            ttl = self.etcd.refresh(self._lease)
        if ttl <= 0:
            self._valid_until = 0.0
            raise ControllerError(f"lease {self._lease:x} expired in etcd")
        self._valid_until = sent + LEASE_TTL_S - FENCE_MARGIN_S

    def fence(self) -> str:
        """ "" while this broker may acknowledge writes, else why not."""
        if self.restart.is_set():
            return f"broker is leaving its role: {self.restart_reason}"
        if time.monotonic() >= self._valid_until:
            return "master could not renew its controller lease in time"
        return ""

    # ---- joining ----------------------------------------------------------------------------

    def join(self, timeout_s: float = 120.0) -> Role:
        """Block until this broker's role is known (see the module docstring)."""
        deadline = time.monotonic() + timeout_s
        self._record = {
            "epoch": epoch_log.last_epoch(self.store_dir),
            "offset": -1,
            "endpoint": "",
            "ha": "",
            "ha_link": "",
        }
        while True:
            try:
                self._renew()
                self.etcd.put_member(self.node, self._record, self._lease)
                role = self._decide()
                if role is not None:
                    self.role = role
                    log.info(
                        "controller: %s joins group %s as %s (epoch %d)",
                        self.node,
                        self.etcd.group,
                        "master" if role.broker_id == 0 else f"slave of {role.ha_master}",
                        role.epoch,
                    )
                    return role
            except ControllerError as exc:
                log.warning("controller: %s", exc)
            if time.monotonic() > deadline:
                raise ControllerError(
                    f"no role for {self.node} in group {self.etcd.group} "
                    f"within {timeout_s:.0f} s (no live master, not "
                    "eligible to become one)"
                )
            time.sleep(LOOP_S)

    def _decide(self) -> Role | None:
        state, raw = self.etcd.state()
        members = self.etcd.members()
        seen = members.get(state.master, {}) if state is not None else {}
        self.master_endpoint = str(seen.get("endpoint", ""))
        if state is None:
            new = GroupState(
                self.node, 1, [self.node], 1, [[1, epoch_log.commitlog_end(self.store_dir)]]
            )
            return self._become_master(raw, new)
        if state.master == self.node:
            self._save_epochs(state)
            return Role(0, "", state.epoch)
        master = members.get(state.master)
        if master is not None and master.get("ha"):
            self._follow(state)
            return Role(self.etcd.member_id(self.node), master["ha"], state.epoch)
        live_in_sync = [n for n in state.in_sync if n in members]
        if master is None and live_in_sync == [self.node]:
            return self._become_master(
                raw, self._next_term(state, epoch_log.commitlog_end(self.store_dir))
            )
        return None

    def _next_term(self, state: GroupState, start: int) -> GroupState:
        epoch = state.epoch + 1
        return GroupState(
            self.node, epoch, [self.node], state.set_epoch + 1, [*state.epochs, [epoch, start]]
        )

    def _become_master(self, raw: str, new: GroupState) -> Role | None:
        if not self.etcd.cas(raw, new):
            return None  # someone else decided first: look again
        log.warning(
            "controller: %s elected master of %s, epoch %d from offset %d",
            self.node,
            self.etcd.group,
            new.epoch,
            new.epochs[-1][1],
        )
        self._save_epochs(new)
        return Role(0, "", new.epoch)

    def _save_epochs(self, state: GroupState) -> None:
        mine = epoch_log.load_entries(self.store_dir)
        known = {e for e, _ in mine}
        entries = [*mine, *([e, s] for e, s in state.epochs if e not in known)]
        epoch_log.save_entries(self.store_dir, entries)

    def _follow(self, state: GroupState) -> None:
        """Cut the closed store at the first epoch it does not know, then adopt the history."""
        cut = epoch_log.cut_at(state.epochs, epoch_log.last_epoch(self.store_dir))
        if cut is not None:
            dropped = epoch_log.truncate_commitlog(self.store_dir, cut)
            if dropped:
                log.warning(
                    "controller: %s cut its log at %d (epoch %d starts there): %d "
                    "unacknowledged bytes dropped",
                    self.node,
                    cut,
                    state.epoch,
                    dropped,
                )
        self._save_epochs(state)

    # ---- running ----------------------------------------------------------------------------

    def attach(
        self,
        replication: Replication,
        endpoint: str,
        *,
        promote: Callable[[], None],
        on_promoted: Callable[[], None] = _nothing,
    ) -> None:
        """The broker runs: publish its addresses and start the loop. ``promote`` makes
        the running broker its group's master in place (``Broker.promote``);
        ``on_promoted`` runs after it (the server re-registers as broker id 0)."""
        self._replication = replication
        self._promote = promote
        self._on_promoted = on_promoted
        self._record.update(endpoint=endpoint, ha=replication.ha_endpoint)
        replication.attach_controller(self.fence, self.thread)
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop(timeout_ms=5_000)

    def _leave(self, reason: str) -> None:
        if not self.restart.is_set():
            log.warning("controller: %s restarts: %s", self.node, reason)
            self.restart_reason = reason
            self.restart.set()

    def _tick(self) -> None:
        """One round of the loop; nothing more once the broker is leaving its role."""
        if self.restart.is_set():
            return
        try:
            self._round()
        except ControllerError as exc:
            log.warning("controller: %s", exc)
            if "expired" in str(exc):
                self._leave(str(exc))
        except RocketMQError as exc:
            log.warning("controller round failed: %s", exc)

    def _round(self) -> None:
        assert self._replication is not None and self.role is not None
        self._renew()
        slave = self._replication.slave
        self._record.update(
            offset=self._replication.log_end(),
            ha_link=slave.local_address if slave is not None else "",
        )
        self.etcd.put_member(self.node, self._record, self._lease)
        state, raw = self.etcd.state()
        members = self.etcd.members()
        seen = members.get(state.master, {}) if state is not None else {}
        self.master_endpoint = str(seen.get("endpoint", ""))
        if state is None:
            self._leave("the group's state vanished from etcd")
        elif self.role.broker_id == 0:
            self._master_round(state, raw, members)
        else:
            self._slave_round(state, raw, members)

    def _master_round(
        self, state: GroupState, raw: str, members: dict[str, dict[str, Any]]
    ) -> None:
        assert self._replication is not None and self.role is not None
        if state.master != self.node or state.epoch != self.role.epoch:
            self._leave(f"master is now {state.master} (epoch {state.epoch})")
            return
        in_sync = self._replication.in_sync
        by_link = {m.get("ha_link"): n for n, m in members.items() if m.get("ha_link")}
        local = {by_link[name] for name in in_sync.members() if name in by_link}
        wanted = sorted({self.node, *local})
        links = {n: m.get("ha_link", "") for n, m in members.items()}
        in_sync.required = {links.get(n, n) for n in {*state.in_sync, *wanted} - {self.node}}
        if wanted != sorted(state.in_sync):
            new = replace(state, in_sync=wanted, set_epoch=state.set_epoch + 1)
            if self.etcd.cas(raw, new):
                log.warning(
                    "controller: in-sync set of %s is now %s (set epoch %d)",
                    self.etcd.group,
                    wanted,
                    new.set_epoch,
                )
                in_sync.required = {links.get(n, n) for n in wanted if n != self.node}

    def _slave_round(self, state: GroupState, raw: str, members: dict[str, dict[str, Any]]) -> None:
        assert self._replication is not None and self.role is not None
        if state.epoch != self.role.epoch or state.master == self.node:
            self._leave(f"group {self.etcd.group} moved to epoch {state.epoch}")
            return
        if state.master in members or self.node not in state.in_sync:
            return
        ranked = sorted(
            (n for n in state.in_sync if n in members),
            key=lambda n: (-int(members[n].get("epoch", 0)), -int(members[n].get("offset", -1)), n),
        )
        if not ranked or ranked[0] != self.node:
            return
        replication = self._replication
        if replication.slave is not None:
            replication.slave.halt()  # no byte of the old term after the start is fixed
        start = replication.log_end()
        role = self._become_master(raw, self._next_term(state, start))
        if role is None:
            self._leave("lost the election race")
            return
        try:
            self._promote()
        except Exception as exc:  # the restart path is the fallback: it always works
            log.exception("controller: promotion in place failed")
            self._leave(f"elected master at epoch {role.epoch}; promotion in place failed: {exc}")
            return
        self.role = role
        self._record.update(epoch=role.epoch, ha=replication.ha_endpoint, ha_link="")
        self._on_promoted()

    def status(self) -> dict[str, Any]:
        state = self.etcd.state()[0]
        return {"node": self.node, "state": None if state is None else state.to_json()}
