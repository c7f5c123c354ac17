"""Reviving POP deliveries: what happens when invisible time ends, or a client gives up.

For each due delivery ``policy.revive_decision`` picks a destination: a copy to
``%RETRY%{group}`` (non-FIFO), the same offset visible again (FIFO; in memory only: a
restart re-derives it from the deadline), or a copy to ``%DLQ%{group}``. Copies and
the resolution records that end the original deliveries go to the store in one
``put_messages`` call (copies first), and only then is in-memory state changed, so a
failed append changes nothing and the caller can retry. A message the store no longer
holds (retention) is resolved with a DROPPED record.

Threads: the POP service calls :meth:`Reviver.revive` under its lock.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.broker.lite import split_lmq
from broker_core.broker.pop.log import PopRecord, RecordKind, ReviveLog
from broker_core.broker.pop.policy import (
    Destination,
    delivered_topic,
    revive_copy,
    revive_decision,
)
from broker_core.broker.pop.scan import QueueScanner
from broker_core.broker.pop.state import InFlight, PopState, QueueState
from broker_core.broker.retry import RetryPolicy
from broker_core.message import Message

Due = list[tuple[QueueState, InFlight]]
_GIVE_UP = RetryPolicy(max_retries=0)  # any attempt is over the limit: straight to the DLQ


def resolution(kind: RecordKind, entry: InFlight, now_ms: int) -> PopRecord:
    """The record that ends delivery ``entry`` for good."""
    group, topic, qid = entry.key
    return PopRecord(kind, group, topic, qid, entry.offset, resolves=entry.version, time_ms=now_ms)


class Reviver:
    """Applies revive decisions for deliveries held in ``state``."""

    def __init__(
        self,
        log: ReviveLog,
        state: PopState,
        scanner: QueueScanner,
        policy_for: Callable[[str], RetryPolicy],
        is_fifo: Callable[[str], bool],
        group_of: Callable[[str], str] = lambda group: group,
    ) -> None:
        self._log = log
        self._state = state
        self._scanner = scanner
        self._policy_for = policy_for
        self._is_fifo = is_fifo
        self._group_of = group_of  # whose DLQ: a broadcast member's is its group's

    def _in_place(self, group: str, topic: str) -> bool:
        """True when a delivery is retried from its own queue: FIFO groups, lite topics."""
        return self._is_fifo(group) or split_lmq(topic) is not None

    def revive(self, due: Due, now_ms: int, *, force_dlq: bool = False) -> None:
        """Retry, re-expose or dead-letter each of ``due`` (all to the DLQ if ``force_dlq``)."""
        copies: list[Message] = []
        records: list[PopRecord] = []
        resolved: Due = []
        in_place: Due = []
        for qs, entry in due:
            group, topic, qid = qs.key
            policy = _GIVE_UP if force_dlq else self._policy_for(group)
            decision = revive_decision(
                self._group_of(group),
                topic,
                entry.attempt,
                policy,
                fifo=self._in_place(group, topic),
                now_ms=now_ms,
            )
            if decision.destination is Destination.IN_PLACE:
                in_place.append((qs, entry))
                continue
            message = self._scanner.read(topic, qid, entry.offset)
            if message is None:
                kind = RecordKind.DROPPED
            else:
                copies.append(
                    revive_copy(
                        message,
                        decision.topic,
                        decision.reconsume_times,
                        delivered_topic(topic, message),
                    )
                )
                retry = decision.destination is Destination.RETRY
                kind = RecordKind.REVIVED if retry else RecordKind.DEAD_LETTERED
            records.append(resolution(kind, entry, now_ms))
            resolved.append((qs, entry))
        if records:
            self._log.append(records, copies)
        for qs, entry in resolved:
            self._state.resolve(qs, entry)
        for qs, entry in in_place:
            self._state.expire(qs, entry)
