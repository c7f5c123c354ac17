"""Long polling: a pull that finds nothing is parked until dispatch brings a match.

A consumer at the end of its queue would otherwise spin on empty pulls. Instead the
request is *parked*, keyed by ``(topic, queue_id)``, and answered

* when dispatch reports that queue grew and re-running the pull now delivers messages
  (or finds the offset illegal), or
* at its deadline, with NO_NEW_MESSAGE and the offset it reached, or
* when the service stops, the same way.

A parked pull whose filter rejects the new messages stays parked; its offset advances
past the rejected units so they are not scanned again, and its answer carries that
offset. Each parked request is answered exactly once (or never, if cancelled).

Threads. The store's dispatch thread calls the listener, which never reads the store, so
many parked pulls or a costly SQL92 filter cannot slow dispatch: a caller blocked in
``pull_blocking`` is claimed and woken directly (it pulls again on its own thread, so
the answer is one thread switch away from dispatch, with no polling interval); for other
requests it only marks the queue "woken" and signals the *hold thread*. The hold thread
(``start``/``stop``; one thread, no thread per request) re-runs the pulls of woken
queues and completes expired requests from a heap of deadlines. Tests drive it with
``run_once(now_ms)`` and an injected clock instead. ``park``, ``cancel``
and ``pull_blocking`` may be called from any thread; callbacks run on the
hold thread (or on the caller's thread when ``park`` answers at once), outside every
lock, and must be quick — set an event, post to a loop. A callback that raises is
logged and ignored.

Durability: none. Parked requests live in memory; after a restart consumers simply pull
again from their offsets. Stop this service before closing its store.

>>> import tempfile, threading
>>> from broker_core.config import StoreConfig
>>> from broker_core.message import Message
>>> from broker_core.store.message_store import MessageStore
>>> store = MessageStore(StoreConfig(store_dir=tempfile.mkdtemp(), segment_size_bytes=1 << 20,
...                                  max_body_bytes=1024))
>>> _ = store.open()
>>> polling = LongPollingService(store)
>>> polling.start()
>>> timer = threading.Timer(0.05, store.put_messages, [[Message("t", b"late")]])
>>> timer.start()
>>> [m.body for m in polling.pull_blocking(PullRequest("t", 0, 0), timeout_ms=5_000).messages]
[b'late']
>>> polling.stop(); store.close()
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.broker.pull import PullRequest, PullResult, PullService, PullStatus
from broker_core.clock import monotonic_ms
from broker_core.errors import RocketMQError
from broker_core.service_thread import ServiceThread
from broker_core.store.message_store import MessageStore

log = logging.getLogger(__name__)

PullCallback = Callable[[PullResult], None]
QueueKey = tuple[str, int]  # (topic, queue id)

DEFAULT_MAX_PARKED = 100_000
_MAX_WAIT_S = 1.0  # the hold thread re-reads the clock at least this often


@dataclass(eq=False, slots=True)
class ParkedPull:
    """One parked request; ``request.offset`` advances past units its filter rejected."""

    request: PullRequest
    deadline_ms: int
    callback: PullCallback
    seq: int
    done: bool = False
    # Set for a caller blocked in ``pull_blocking``: dispatch claims the request and sets
    # this, and the caller re-runs its pull itself (no hop through the hold thread).
    direct: threading.Event | None = None

    @property
    def key(self) -> QueueKey:
        return self.request.topic, self.request.queue_id


class LongPollingService:
    """Parks empty pulls per queue and answers them on dispatch or at their deadline."""

    def __init__(
        self,
        store: MessageStore,
        pull_service: PullService | None = None,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        max_parked: int = DEFAULT_MAX_PARKED,
    ) -> None:
        self._store = store
        self._pull = pull_service or PullService(store)
        self._clock_ms = clock_ms
        self._max_parked = max_parked
        self._lock = threading.Lock()
        self._round_lock = threading.Lock()  # one run_once at a time
        self._by_queue: dict[QueueKey, dict[int, ParkedPull]] = {}
        self._deadlines: list[tuple[int, int, ParkedPull]] = []
        self._woken: set[QueueKey] = set()
        self._count = 0
        self._seq = itertools.count()
        self._stopped = False
        # A failed round is logged and retried: the hold thread outlives one bad round.
        self.thread = ServiceThread(
            "long-polling",
            self._round,
            interval_ms=_MAX_WAIT_S * 1000,
            next_wait_ms=self._next_wait_ms,
        )
        store.add_dispatch_listener(self._on_dispatch)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the hold thread (daemon)."""
        with self._lock:
            if self._stopped:
                return
        self.thread.start()

    def stop(self) -> None:
        """Stop the hold thread and answer every parked request with NO_NEW_MESSAGE.

        Later ``park`` calls are answered at once; dispatch events are ignored.
        """
        with self._lock:
            self._stopped = True
        self.thread.stop()
        with self._lock:
            rest = [p for parked in self._by_queue.values() for p in parked.values()]
            for p in rest:
                self._claim_locked(p)
            self._deadlines.clear()
            self._woken.clear()
        for p in rest:
            self._answer_empty(p)

    @property
    def parked_count(self) -> int:
        with self._lock:
            return self._count

    # ---- parking ------------------------------------------------------------------------

    def park(
        self,
        request: PullRequest,
        deadline_ms: int,
        callback: PullCallback,
        direct: threading.Event | None = None,
    ) -> ParkedPull | None:
        """Hold ``request`` until messages for it arrive or ``deadline_ms`` (service clock).

        Call it after a pull came back empty. Returns the handle (for :meth:`cancel`),
        or None when the request was answered at once with NO_NEW_MESSAGE because the
        service is stopped or ``max_parked`` requests are already held. With ``direct``,
        new messages do not run ``callback``: they claim the request and set ``direct``
        (the caller pulls again itself); the deadline and ``stop`` still run ``callback``.
        """
        parked = ParkedPull(request, deadline_ms, callback, next(self._seq), direct=direct)
        with self._lock:
            stopped, full = self._stopped, self._count >= self._max_parked
            if not (stopped or full):
                self._by_queue.setdefault(parked.key, {})[parked.seq] = parked
                self._count += 1
                heapq.heappush(self._deadlines, (deadline_ms, parked.seq, parked))
                if self._deadlines[0][2] is parked:
                    self.thread.wake()  # an earlier deadline than the hold thread waits for
        if stopped or full:
            if full and not stopped:
                log.warning("long polling full (%d parked): answering at once", self._max_parked)
            _call(callback, self._pull.empty_result(request, PullStatus.NO_NEW_MESSAGE))
            return None
        # A message dispatched between the caller's pull and the registration above
        # signalled nobody; look once more now that the request is visible to the listener.
        max_offset = self._store.max_offset(request.topic, request.queue_id)
        if max_offset > request.offset:
            self._on_dispatch(request.topic, request.queue_id, max_offset)
        return parked

    def cancel(self, parked: ParkedPull) -> bool:
        """Forget a parked request without answering it; False if it was already answered."""
        with self._lock:
            return self._claim_locked(parked)

    def pull_or_park(
        self, request: PullRequest, deadline_ms: int, callback: PullCallback
    ) -> ParkedPull | None:
        """Pull now; answer at once if that delivers, else park until ``deadline_ms``.

        The immediate answer runs ``callback`` on the caller's thread.
        """
        result = self._pull.execute(request)
        if not result.status.empty or self._clock_ms() >= deadline_ms:
            _call(callback, result)
            return None
        return self.park(request.at(result.next_offset), deadline_ms, callback)

    def pull_blocking(self, request: PullRequest, *, timeout_ms: int) -> PullResult:
        """Pull, waiting up to ``timeout_ms`` for messages (thread-per-request servers).

        The caller's thread is woken by dispatch itself and pulls again at once: the
        answer to a parked pull costs one thread switch after the message is dispatched.
        """
        deadline_ms = self._clock_ms() + timeout_ms
        while True:
            result = self._pull.execute(request)
            if not result.status.empty or self._clock_ms() >= deadline_ms:
                return result
            request = request.at(result.next_offset)
            answered = self._wait_parked(request, deadline_ms)
            if answered is not None:
                return answered

    def _wait_parked(self, request: PullRequest, deadline_ms: int) -> PullResult | None:
        """Park ``request`` for a blocked caller; its answer, or None to pull again."""
        woken = threading.Event()
        box: list[PullResult] = []

        def deliver(result: PullResult) -> None:
            box.append(result)
            woken.set()

        parked = self.park(request, deadline_ms, deliver, direct=woken)
        if parked is None:
            return box[0]  # answered at once (stopped or full)
        remaining_s = max(deadline_ms - self._clock_ms(), 0) / 1000
        if not woken.wait(remaining_s):
            if self.cancel(parked):  # nobody claimed it: the deadline is ours to answer
                return self._pull.empty_result(parked.request, PullStatus.NO_NEW_MESSAGE)
            woken.wait()  # claimed meanwhile: its wake-up or answer is on its way
        return box[0] if box else None

    # ---- the hold thread's work ----------------------------------------------------------

    def run_once(self, now_ms: int) -> int:
        """Re-run the pulls of woken queues, then expire deadlines ``<= now_ms``.

        Returns how many requests were answered. Called by the hold thread, or by tests
        that have not started it.
        """
        with self._round_lock:
            return self._serve_woken() + self._expire(now_ms)

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store dispatch listener (dispatch thread): never reads the store.

        Blocked callers behind ``max_offset`` are claimed and woken to pull themselves;
        the queue is marked for the hold thread if other requests are parked on it.
        """
        key = (topic, queue_id)
        ready: list[threading.Event] = []
        with self._lock:
            parked = self._by_queue.get(key)
            if parked is None or self._stopped:
                return
            others = False
            for p in list(parked.values()):
                if p.direct is None:
                    others = True
                elif p.request.offset < max_offset and self._claim_locked(p):
                    ready.append(p.direct)
            if others:
                self._woken.add(key)
                self.thread.wake()
        for event in ready:
            event.set()

    def _wake(self, key: QueueKey) -> None:
        with self._lock:
            self._woken.add(key)
            self.thread.wake()

    def _serve_woken(self) -> int:
        with self._lock:
            woken, self._woken = self._woken, set()
        answered = 0
        for key in woken:
            max_offset = self._store.max_offset(*key)
            with self._lock:
                ready = [
                    p
                    for p in self._by_queue.get(key, {}).values()
                    if p.request.offset < max_offset and p.direct is None
                ]
            for parked in ready:
                answered += self._retry(parked)
        return answered

    def _retry(self, parked: ParkedPull) -> int:
        """Re-run one parked pull; answer it if it now delivers. Returns 1 if answered."""
        try:
            result = self._pull.execute(parked.request)
        except RocketMQError:
            log.exception("parked pull of %s:%d failed; it waits for its deadline", *parked.key)
            return 0
        if result.status.empty:
            progressed = result.next_offset > parked.request.offset
            with self._lock:
                if progressed and not parked.done:
                    parked.request = parked.request.at(result.next_offset)
            if progressed and result.next_offset < result.max_offset:
                self._wake(parked.key)  # the bounded scan stopped early: go on next round
            return 0
        with self._lock:
            claimed = self._claim_locked(parked)
        if claimed:
            _call(parked.callback, result)
        return int(claimed)

    def _expire(self, now_ms: int) -> int:
        due: list[ParkedPull] = []
        with self._lock:
            heap = self._deadlines
            while heap and heap[0][0] <= now_ms:
                parked = heapq.heappop(heap)[2]
                if self._claim_locked(parked):
                    due.append(parked)
            if len(heap) > 2 * self._count + 1024:  # drop entries answered early
                self._deadlines = [e for e in heap if not e[2].done]
                heapq.heapify(self._deadlines)
        for parked in due:
            self._answer_empty(parked)
        return len(due)

    def _claim_locked(self, parked: ParkedPull) -> bool:
        """Take ``parked`` out of the table so exactly one party answers it (lock held)."""
        if parked.done:
            return False
        parked.done = True
        self._count -= 1
        queue = self._by_queue.get(parked.key)
        if queue is not None:
            queue.pop(parked.seq, None)
            if not queue:
                del self._by_queue[parked.key]
        return True

    def _answer_empty(self, parked: ParkedPull) -> None:
        _call(parked.callback, self._pull.empty_result(parked.request, PullStatus.NO_NEW_MESSAGE))

    def _wait_s(self, now_ms: int) -> float:
        if self._woken:
            return 0.0
        if not self._deadlines:
            return _MAX_WAIT_S
        return min(max(self._deadlines[0][0] - now_ms, 0) / 1000, _MAX_WAIT_S)

    def _next_wait_ms(self) -> float:
        with self._lock:
            return self._wait_s(self._clock_ms()) * 1000

    def _round(self) -> None:
        self.run_once(self._clock_ms())


def _call(callback: PullCallback, result: PullResult) -> None:
    try:
        callback(result)
    except Exception:  # a caller's bug must not kill the hold thread
        log.exception("long polling callback failed")
