"""Long polling through asyncio: pull_async answers, timeouts, sharing one loop, cancellation.

Each scenario runs in a thread of its own (``run_in_own_thread``): ``asyncio.run`` in the
main thread would leave it without a current event loop for later tests' gRPC clients.
"""

from __future__ import annotations

import asyncio

import pytest

from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.pull import PullRequest, PullResult, PullStatus
from broker_core.store.message_store import MessageStore
from tests.broker.async_pull import pull_async
from tests.broker.conftest import LONG_TIMEOUT_MS, msg
from tests.event_loops import run_in_own_thread

# ---- asyncio ------------------------------------------------------------------------------------


def test_pull_async_is_answered_when_a_message_arrives(
    store: MessageStore, polling: LongPollingService
) -> None:
    async def scenario() -> tuple[PullResult, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.create_task(
            pull_async(polling, PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
        await asyncio.sleep(0)  # let the task start its first pull
        await loop.run_in_executor(None, store.put_messages, [msg("A", body=b"async")])
        result = await asyncio.wait_for(task, LONG_TIMEOUT_MS / 1000)
        return result, loop.time() - started

    result, elapsed_s = run_in_own_thread(scenario())
    assert [m.body for m in result.messages] == [b"async"]
    assert elapsed_s < LONG_TIMEOUT_MS / 1000 / 2


def test_pull_async_times_out(polling: LongPollingService) -> None:
    result = run_in_own_thread(pull_async(polling, PullRequest("t", 0, 0), timeout_ms=100))
    assert result.status is PullStatus.NO_NEW_MESSAGE


def test_many_async_pulls_share_one_loop(store: MessageStore, polling: LongPollingService) -> None:
    async def scenario() -> list[PullResult]:
        pulls = [
            pull_async(polling, PullRequest("t", qid, 0), timeout_ms=LONG_TIMEOUT_MS)
            for qid in range(20)
        ]
        tasks = [asyncio.create_task(p) for p in pulls]
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, store.put_messages, [msg("A", queue_id=qid) for qid in range(20)]
        )
        return await asyncio.wait_for(asyncio.gather(*tasks), LONG_TIMEOUT_MS / 1000)

    results = run_in_own_thread(scenario())
    assert [r.messages[0].queue_id for r in results] == list(range(20))


def test_cancelled_async_pull_is_unparked(polling: LongPollingService) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(
            pull_async(polling, PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
        async with asyncio.timeout(5):
            while polling.parked_count == 0:  # yields to the loop each turn
                await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert polling.parked_count == 0

    run_in_own_thread(scenario())


def test_async_pull_cancelled_during_its_first_pull_is_unparked(
    polling: LongPollingService,
) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(
            pull_async(polling, PullRequest("t", 0, 0), timeout_ms=LONG_TIMEOUT_MS)
        )
        await asyncio.sleep(0)  # the task is now waiting for its first pull in the executor
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_in_own_thread(scenario())  # returns after the executor finished and its callbacks ran
    assert polling.parked_count == 0
