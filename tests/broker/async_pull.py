"""A reference asyncio adapter over ``LongPollingService`` (test-only: no production caller).

It shows the contract an event-loop front end relies on: ``pull_or_park`` never blocks for
the hold, its callback may be posted to a loop with ``call_soon_threadsafe``, and
``cancel`` unparks a request whose awaiting task was cancelled.
"""

from __future__ import annotations

import asyncio

from broker_core.broker.long_polling import LongPollingService, ParkedPull
from broker_core.broker.pull import PullRequest, PullResult
from broker_core.clock import monotonic_ms


async def pull_async(
    polling: LongPollingService, request: PullRequest, *, timeout_ms: int
) -> PullResult:
    """Pull, waiting up to ``timeout_ms`` for messages, without blocking the event loop.

    The first pull runs in the loop's default executor; the answer is handed back with
    ``loop.call_soon_threadsafe``. Cancelling the awaiting task cancels the parked request.
    ``polling`` must run on the real clock (``monotonic_ms``).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[PullResult] = loop.create_future()
    deadline_ms = monotonic_ms() + timeout_ms

    def deliver(result: PullResult) -> None:
        loop.call_soon_threadsafe(_resolve, future, result)

    parking = loop.run_in_executor(None, polling.pull_or_park, request, deadline_ms, deliver)
    try:
        parked = await asyncio.shield(parking)
    except asyncio.CancelledError:  # the first pull still runs: unpark when it is done
        parking.add_done_callback(lambda done: _cancel_when_parked(polling, done))
        raise
    try:
        return await future
    except asyncio.CancelledError:
        if parked is not None:
            polling.cancel(parked)
        raise


def _cancel_when_parked(
    polling: LongPollingService, parking: asyncio.Future[ParkedPull | None]
) -> None:
    if not parking.cancelled() and parking.exception() is None:
        parked = parking.result()
        if parked is not None:
            polling.cancel(parked)


def _resolve(future: asyncio.Future[PullResult], result: PullResult) -> None:
    if not future.done():  # the awaiting task may have been cancelled
        future.set_result(result)
