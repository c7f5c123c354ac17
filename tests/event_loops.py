"""Run asyncio in tests without changing the main thread's event-loop state.

``asyncio.run()`` in the main thread ends with ``set_event_loop(None)``; from then on the
thread's policy counts its loop as *explicitly* unset, and (Python 3.11)
``get_event_loop()`` there raises "There is no current event loop in thread 'MainThread'"
instead of making a default loop. The official Python client (``rocketmq`` on PyPI) opens
its Telemetry stream through ``grpc.aio``, which looks up the *calling* thread's loop; the
call runs in the thread that started the client whenever the broker's route answer is
back before the client adds its done-callback. So one ``asyncio.run()`` in an earlier test
made a later test's telemetry stream fail now and then. Tests that need a loop use
:func:`run_in_own_thread`; :func:`main_thread_loop_problem` is the suite-wide check (root
``conftest.py``) that no test leaves the main thread that way again.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_own_thread(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` in a new thread; its result, or its exception re-raised here.

    The new thread gets (and closes) its own loop, default executor included, so the
    caller's thread keeps whatever event-loop state it had.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = asyncio.run(coro)
        except BaseException as exc:  # handed back to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="test-asyncio-run")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["result"]
    return result


def main_thread_loop_problem() -> str | None:
    """Why the main thread has no usable current event loop now, or None if it has one.

    Called in the main thread. If the thread never set a loop this makes the default
    one, as ``grpc.aio`` would on its first call there.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError as exc:
        return str(exc)
    return "its current event loop is closed" if loop.is_closed() else None
