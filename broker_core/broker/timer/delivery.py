"""The delivery thread of a timed-delivery service (``schedule`` and ``timer``).

Both services read a system topic the store fills and put the messages that are due back
as their real ones. Their thread is the same: a round at once, then rounds ``next_wait_ms()``
apart (at most the idle wait), woken early when the store dispatches a message of the
service's topic; a failed round is retried after 1 s; the store closing under it ends the
thread quietly. The dispatch listener only signals: it runs on the store's dispatch thread.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.errors import StoreClosedError
from broker_core.service_thread import ServiceThread
from broker_core.store.message_store import MessageStore

RETRY_AFTER_ERROR_MS = 1000


def delivery_thread(
    name: str,
    store: MessageStore,
    topic: str,
    round_fn: Callable[[], object],
    *,
    max_idle_wait_ms: int,
    next_wait_ms: Callable[[], float],
) -> ServiceThread:
    """A (not yet started) thread running ``round_fn``, woken by every dispatch to ``topic``."""
    thread = ServiceThread(
        name,
        round_fn,
        interval_ms=max_idle_wait_ms,
        wait_first=False,
        next_wait_ms=next_wait_ms,
        error_backoff_ms=RETRY_AFTER_ERROR_MS,
        quiet_exit=lambda exc: isinstance(exc, StoreClosedError),
    )

    def wake_on_topic(dispatched: str, _queue_id: int, _max_offset: int) -> None:
        if dispatched == topic:
            thread.wake()

    store.add_dispatch_listener(wake_on_topic)
    return thread
