"""Who is connected over remoting: client ids, their channels, groups and subscriptions.

A 4.x client sends HEART_BEAT (34) every 30 s on each broker connection with its client id,
its producer groups and its consumer groups with their subscriptions. This table remembers,
per client id, the channel it last spoke on (to push NOTIFY_CONSUMER_IDS_CHANGED and
CHECK_TRANSACTION_STATE to it) and per (group, topic) the subscription its PULL_MESSAGE
falls back to when the pull carries none. Liveness itself is the broker's
``ClientRegistry`` (shared with gRPC clients): this table only maps it onto channels.

It also remembers, per producer group, the open channels that sent a half message of
the group (:meth:`RemotingSessions.half_sent`). A 4.x producer heartbeats only to the
brokers it knows when its timer fires (1 s after its start, then every 30 s); one whose
first send came later is unknown to this broker for up to 30 s, and a check-back due
before that found no producer to ask, spent one of the half's checks, and after the
maximum rolled a transaction back whose producer was connected all along. The channel
the half came on is that producer's: a check-back may ask it (:meth:`check_channels`).

Threads: every method may be called from any connection thread (one lock).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from broker_core.remoting.channel import Channel


@dataclass
class ClientSession:
    """One client id: its channel and the groups it heartbeats for."""

    client_id: str
    channel: Channel
    language: int = 0  # the LanguageCode of its last heartbeat
    version: int = 0
    producer_groups: set[str] = field(default_factory=set)
    consumer_groups: set[str] = field(default_factory=set)


class RemotingSessions:
    """Client id -> session; subscriptions by (group, topic). See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[str, ClientSession] = {}
        self._subscriptions: dict[tuple[str, str], tuple[str, str]] = {}
        self._half_senders: dict[str, list[Channel]] = {}  # producer group -> channels

    def touch(self, client_id: str, channel: Channel) -> ClientSession:
        """The session of ``client_id``, now bound to ``channel`` (created if new)."""
        with self._lock:
            session = self._clients.get(client_id)
            if session is None or session.channel is not channel:
                old = session
                session = ClientSession(client_id, channel)
                if old is not None:
                    session.producer_groups, session.consumer_groups = (
                        old.producer_groups,
                        old.consumer_groups,
                    )
                self._clients[client_id] = session
            return session

    def subscribe(self, group: str, topic: str, expression_type: str, expression: str) -> None:
        with self._lock:
            self._subscriptions[(group, topic)] = (expression_type, expression)

    def subscription(self, group: str, topic: str) -> tuple[str, str] | None:
        with self._lock:
            return self._subscriptions.get((group, topic))

    def subscriptions_of(self, group: str) -> dict[str, tuple[str, str]]:
        """topic -> (expression type, expression) of every subscription ``group`` sent."""
        with self._lock:
            return {t: sub for (g, t), sub in self._subscriptions.items() if g == group}

    def closed(self, channel: Channel) -> list[ClientSession]:
        """Forget every client whose channel this was; returns them (to unregister)."""
        with self._lock:
            gone = [s for s in self._clients.values() if s.channel is channel]
            for session in gone:
                del self._clients[session.client_id]
            for group in [g for g, chans in self._half_senders.items() if channel in chans]:
                self._half_senders[group].remove(channel)
                if not self._half_senders[group]:
                    del self._half_senders[group]
        return gone

    def half_sent(self, group: str, channel: Channel) -> None:
        """``channel`` sent a half message of producer group ``group`` (see the module doc)."""
        with self._lock:
            channels = self._half_senders.setdefault(group, [])
            if channel not in channels and not channel.closed:
                channels.append(channel)

    def check_channels(self, group: str) -> list[tuple[str, Channel]]:
        """(who, channel) to ask about a half of ``group``: the channels of clients that
        heartbeat for it, then those that sent halves of it and are still open."""
        with self._lock:
            found = [
                (s.client_id, s.channel)
                for s in self._clients.values()
                if group in s.producer_groups
            ]
            known = {c.id for _, c in found}
            found += [
                (c.peer, c)
                for c in self._half_senders.get(group, [])
                if c.id not in known and not c.closed
            ]
        return found

    def producers_of(self, group: str) -> list[ClientSession]:
        with self._lock:
            return [s for s in self._clients.values() if group in s.producer_groups]

    def consumers_of(self, group: str) -> list[ClientSession]:
        with self._lock:
            return [s for s in self._clients.values() if group in s.consumer_groups]
