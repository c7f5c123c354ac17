"""The official client's Telemetry stream opened from the main thread after asyncio ran.

Issue 24: the official PushConsumer/Producer now and then logged "create stream_steam_call
... exception: There is no current event loop in thread 'MainThread'" in a full run. Its
route callback (which opens the stream) runs in the thread that called ``startup()`` when
the broker answers before the client adds the callback, and ``grpc.aio`` then looks up that
thread's current loop, which an earlier ``asyncio.run()`` in the main thread had unset.
Here the callback's call is made in the main thread on purpose, so the race is not needed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from rocketmq import ClientConfiguration, Credentials, Producer

from broker_core.client import RocketMQClient
from tests.event_loops import main_thread_loop_problem, run_in_own_thread
from tests.server.conftest import BrokerProcess, broker_process

__all__ = ["broker_process"]  # the module's broker (fixture)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def client_log() -> Iterator[_Records]:
    """What the official client logs (its logger does not propagate to the root)."""
    logger = logging.getLogger("rocketmq-python-client")
    records = _Records()
    logger.addHandler(records)
    yield records
    logger.removeHandler(records)


def test_telemetry_stream_opens_in_the_main_thread_after_an_asyncio_scenario(
    broker_process: BrokerProcess, client_log: _Records
) -> None:
    run_in_own_thread(asyncio.sleep(0))  # how the asyncio tests now run their scenarios
    with RocketMQClient(broker_process.endpoint) as admin:
        admin.create_topic("loop-topic", queues=1)
    # its route query opens the channel, in the client's I/O thread
    producer = Producer(
        ClientConfiguration(broker_process.endpoint, Credentials()), ("loop-topic",)
    )
    producer.startup()
    try:
        # what the route callback does for new endpoints, here in the main thread
        producer.on_new_endpoints(producer.client_configuration.rpc_endpoints)
    finally:
        producer.shutdown()
    opened = [m for m in client_log.messages if "create stream_steam_call to" in m]
    assert opened, client_log.messages
    assert not [m for m in opened if "exception" in m], opened


def test_the_suite_check_names_asyncio_run_in_the_main_thread() -> None:
    assert main_thread_loop_problem() is None
    asyncio.run(asyncio.sleep(0))  # the old way: leaves the main thread's loop unset
    try:
        assert main_thread_loop_problem() == (
            "There is no current event loop in thread 'MainThread'."
        )
    finally:
        asyncio.set_event_loop(asyncio.new_event_loop())
