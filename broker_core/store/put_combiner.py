"""Sync-mode put combining: concurrent puts share one append (or one lead) and one sync.

With ``flush_mode = sync`` a put returns only once an fdatasync covers it. Group commit
(``flush.CommitLogFlusher``) lets concurrent appends share the fdatasync, but each call
still pays for its own encode, append, dispatch and wake-up, and 64 threads each holding
the GIL for one message at a time spend most of their time handing the GIL and the
commitlog's put lock to each other (see bench/NOTES.md, "Sync group commit"). Here the
calls also share the append, leader/follower style (MySQL's binlog group commit, flat
combining): a caller queues its messages; the first caller to find nobody at work becomes
the leader, takes everything queued (within ``max_messages`` and ``max_body_bytes``),
stores it as one batch with one durability wait, hands every caller its results or its
error, wakes them, and passes the lead to the first caller that queued meanwhile. A lone
caller leads at once and never waits for anyone.

Contract, per call, as if it had been stored alone: its messages are validated as a whole
(a bad message fails only its own call, which stores nothing), stored contiguously and in
order, and the call returns only once they are durable. An error of the shared store step
(busy, closed, flush failed or timed out) is raised in every call of that batch; the
messages of a failed flush may be stored, exactly as for a call alone.

The same combiner sits in front of ``MessageStore.put_batch`` (the put of every send
that arrives encoded: SendMessage, SendBulk, the 4.x sends), its items being encoded
batches: the leader appends the queued batches back to back under one lead, dispatches
once and waits for one durability point, so concurrent single sends share the lead, the
dispatch, the wake-ups and the fdatasync (``MessageStore._put_batches``). A
``put_messages`` combiner feeds that one (``inner``): its leader queues there like any
caller, while a put from the thread that leads the inner combiner (a dispatch listener
that puts) is stored alone at once, so nobody waits for a batch its own thread stores.

Threads: ``put`` from any thread; the leader's work runs on the leading caller's thread.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Batch = TypeVar("Batch")
Result = TypeVar("Result")


def body_bytes(messages: Sequence[Any]) -> int:
    """The default weight of a call: its messages' body bytes (``Message.body``)."""
    return sum(len(m.body) for m in messages)


class _Call(Generic[Result]):
    """One queued ``put``: its messages, its wake-up lock, then its outcome."""

    __slots__ = ("body_bytes", "error", "lead", "messages", "next", "results", "wake")

    def __init__(self, messages: Sequence[Any], weight: int) -> None:
        self.messages = messages
        self.body_bytes = weight
        self.wake = threading.Lock()
        self.wake.acquire()
        self.lead = False  # woken to lead the next batch, not with an outcome
        self.results: list[Result] = []
        self.error: BaseException | None = None
        self.next: _Call[Result] | None = None  # the call of its batch to wake after it

    def outcome(self) -> list[Result]:
        if self.error is not None:
            raise self.error
        return self.results


class PutCombiner(Generic[Item, Batch, Result]):
    """Leader/follower combining of concurrent puts (see the module docstring).

    ``encode(messages)`` validates and encodes (raising for bad input, storing nothing);
    ``store(messages, batch)`` appends the batch, returns once it is durable and gives one
    result per message, in order. A batch holds at most ``max_messages`` messages and
    ``max_body_bytes`` of bodies (``weigh``: the bytes a call counts for), unless one call
    alone is larger. ``inner``: the combiner ``store`` puts through, if any.
    """

    def __init__(
        self,
        encode: Callable[[Sequence[Item]], Batch],
        store: Callable[[Sequence[Item], Batch], list[Result]],
        *,
        max_messages: int = 1024,
        max_body_bytes: int = 8 << 20,
        weigh: Callable[[Sequence[Item]], int] = body_bytes,
        inner: PutCombiner[Any, Any, Any] | None = None,
    ) -> None:
        self._encode = encode
        self._store = store
        self._weigh = weigh
        self._inner = inner
        self._max_messages = max_messages
        self._max_body_bytes = max_body_bytes
        self._mutex = threading.Lock()  # guards _queue and _leading
        self._queue: list[_Call[Result]] = []
        self._leading = False  # a leader is at work: whatever is queued will be taken
        self._leader_thread = 0  # ident of the thread storing a batch, 0 when none
        self.batches = 0  # combined stores done (a metric)
        self.calls = 0  # calls they carried

    @property
    def queued(self) -> int:
        """Calls waiting for a leader to take them (a metric)."""
        return len(self._queue)

    def leads(self, thread: int) -> bool:
        """``thread`` is storing a batch of this combiner or of its inner one."""
        return self._leader_thread == thread or (
            self._inner is not None and self._inner.leads(thread)
        )

    def put(self, messages: Sequence[Item]) -> list[Result]:
        """Store ``messages`` (combined with concurrent calls); their results in order.

        A put made by the leader's own thread while it stores (a dispatch listener or an
        append hook that puts) is stored at once, alone: queued, it would wait for
        itself.
        """
        if self.leads(threading.get_ident()):
            return self._store(messages, self._encode(messages))
        call: _Call[Result] = _Call(messages, self._weigh(messages))
        with self._mutex:
            self._queue.append(call)
            follow, self._leading = self._leading, True
        if follow:
            call.wake.acquire()  # the leader always wakes its batch (``_hand_over``)
            if not call.lead:
                if call.next is not None:
                    call.next.wake.release()
                return call.outcome()
        self._lead()
        return call.outcome()

    def _lead(self) -> None:
        """Store what is queued (this caller's call first), pass the lead, wake the batch."""
        with self._mutex:
            group = self._take()
        self._leader_thread = threading.get_ident()
        try:
            self._commit(group)
        except BaseException as exc:  # e.g. KeyboardInterrupt: nobody may wait forever
            for call in group:
                call.error = call.error or exc
            raise
        finally:
            self._leader_thread = 0
            self._hand_over(group)

    def _hand_over(self, group: list[_Call[Result]]) -> None:
        """Wake the next leader, if calls queued meanwhile, then the batch's followers.

        The followers are woken one after the other, each by the one before (``put``):
        releasing all at once would make them all fight for the GIL (measured: a third
        more context switches per message with 64 callers, and more CPU).
        """
        with self._mutex:
            successor = self._queue[0] if self._queue else None
            self._leading = successor is not None
        if successor is not None:
            successor.lead = True
            successor.wake.release()
        followers = group[1:]
        for call, after in itertools.pairwise(followers):
            call.next = after
        if followers:
            followers[0].wake.release()

    def _take(self) -> list[_Call[Result]]:
        """The calls of the next batch: the first queued and those after it that keep the
        batch within ``max_messages`` and ``max_body_bytes``. Caller holds the mutex."""
        queue = self._queue
        count, size, end = len(queue[0].messages), queue[0].body_bytes, 1
        while end < len(queue):
            count += len(queue[end].messages)
            size += queue[end].body_bytes
            if count > self._max_messages or size > self._max_body_bytes:
                break
            end += 1
        group, self._queue = queue[:end], queue[end:]
        return group

    def _commit(self, group: list[_Call[Result]]) -> None:
        self.batches += 1
        self.calls += len(group)
        if len(group) == 1:
            messages: Sequence[Item] = group[0].messages
        else:
            messages = [m for call in group for m in call.messages]
        try:
            batch = self._encode(messages)
        except Exception:  # some call holds a bad message: each call on its own
            for call in group:
                self._commit_alone(call)
            return
        try:
            results = self._store(messages, batch)
        except Exception as exc:
            for call in group:
                call.error = exc
            return
        start = 0
        for call in group:
            end = start + len(call.messages)
            call.results = results[start:end]
            start = end

    def _commit_alone(self, call: _Call[Result]) -> None:
        try:
            call.results = self._store(call.messages, self._encode(call.messages))
        except Exception as exc:
            call.error = exc
