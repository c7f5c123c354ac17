"""The broker's producer calls: what the front ends call to send and to settle a send.

:class:`Sending` refuses writes on a slave, stores messages through the broker's
deduplicating sender (``dedup.py`` over ``sending.py``'s routing ``Sender``), ends
transactions (and waits for replication of the end, as every send waits for its own)
and recalls timed messages. The broker builds one and holds it as ``broker.sending``;
it needs nothing else of the broker.

Threads: callable from any thread (the services it calls are thread-safe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from broker_core.broker.batch import Batch, Sent, to_store_batch
from broker_core.broker.dedup import DedupSender
from broker_core.broker.sending import SendResult
from broker_core.broker.timer.timer import TimerService
from broker_core.broker.trace.recorder import TraceRecorder
from broker_core.broker.transaction.transaction import (
    EndResult,
    Resolution,
    TransactionService,
)
from broker_core.message import Message
from broker_core.store.columns import ColumnBatch


class Sending:
    """Sends, transaction ends and recalls (see the module docstring).

    ``require_master`` raises NotMasterError on a slave; ``wait_replicated`` returns once
    the log's end is replicated as the broker's HA mode asks."""

    def __init__(
        self,
        sender: DedupSender,
        transactions: TransactionService,
        timer: TimerService,
        trace: TraceRecorder,
        *,
        require_master: Callable[[], None],
        wait_replicated: Callable[[], None],
    ) -> None:
        self._sender, self._transactions, self._timer, self._trace = (
            sender,
            transactions,
            timer,
            trace,
        )
        self._require_master, self._wait_replicated = require_master, wait_replicated

    def send(
        self, messages: Sequence[Message], *, producer_group: str | None = None
    ) -> list[SendResult]:
        """Store messages (routing delayed and transactional ones); results in order
        (:meth:`Sender.send`). NotMasterError on a slave."""
        self._require_master()
        return self._sender.send(messages, producer_group=producer_group)

    def send_batch(self, batch: Batch) -> Sent:
        """Store a front end's batch of plain messages of one topic (:mod:`.batch`), as the
        store's batch (:meth:`Sender.send_columns`); each message's queue offset and queue
        id (a repeat's: its original's). NotMasterError on a slave."""
        self._require_master()
        columns = to_store_batch(batch)
        offsets = self._sender.send_columns(columns, queue_id=batch.queue_id)
        return Sent(offsets, columns.queue_ids.astype(np.int64))

    def send_columns(self, batch: ColumnBatch, *, queue_id: int | None = None) -> np.ndarray:
        """Store the store's batch of plain messages of one topic; returns their queue
        offsets (:meth:`Sender.send_columns`). NotMasterError on a slave. For in-process
        tools and tests that build a ``ColumnBatch``; front ends call :meth:`send_batch`."""
        self._require_master()
        return self._sender.send_columns(batch, queue_id=queue_id)

    def recall(self, recall_handle: str, *, topic: str | None = None) -> bool:
        """Cancel a timed message that has not been delivered yet; with ``topic`` only a
        message of that topic (False for another's, as for an unknown handle)."""
        return self._timer.recall(recall_handle, topic=topic)

    def end_transaction(
        self,
        message_id: str,
        transaction_id: str,
        commit: bool,
        *,
        from_check: bool = False,
        topic: str | None = None,
    ) -> EndResult:
        """Commit or roll back the unresolved half ``message_id``; with ``topic`` (the one
        the caller was authorised on) only if that is the half's real topic, else
        MessageNotFoundError, as for an unknown id."""
        resolution = Resolution.COMMIT if commit else Resolution.ROLLBACK
        result = self._transactions.end(
            message_id, transaction_id, resolution, from_check=from_check, topic=topic
        )
        self._trace.ended(result, topic)
        self._wait_replicated()
        return result
