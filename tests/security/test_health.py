"""grpc.health.v1 on the broker port: NOT_SERVING while the store recovers, SERVING once up,
NOT_SERVING while a background service is dead and once shutdown begins."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.server.app import BrokerServer
from broker_core.server.health import MESSAGING_SERVICE
from tests.server.conftest import BrokerProcess

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _check(endpoint: str, service: str = "") -> int:
    with grpc.insecure_channel(endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return int(reply.status)


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_process_broker_serves_health(broker_process: BrokerProcess) -> None:
    assert _check(broker_process.endpoint) == SERVING
    assert _check(broker_process.endpoint, MESSAGING_SERVICE) == SERVING
    with grpc.insecure_channel(broker_process.endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.fixture
def server_parts(tmp_path: Path):
    broker = Broker(
        BrokerConfig(), StoreConfig(store_dir=str(tmp_path / "store"), segment_size_bytes=16 << 20)
    )
    server = BrokerServer(broker, "127.0.0.1:0")
    server.health.watch_interval_ms = 50
    yield server
    server.stop(0.5)


def test_not_serving_during_recovery_then_serving(server_parts: BrokerServer) -> None:
    server = server_parts
    release = threading.Event()
    real_start = server.broker.start

    def slow_start():  # a long recovery, held open by the test
        release.wait(10)
        return real_start()

    server.broker.start = slow_start  # type: ignore[method-assign]
    starter = threading.Thread(target=server.start)
    starter.start()
    _wait_for(lambda: _can_connect(server.endpoint))
    assert _check(server.endpoint) == NOT_SERVING
    assert _check(server.endpoint, MESSAGING_SERVICE) == NOT_SERVING
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.QueryRoute(service_pb2.QueryRouteRequest(), timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "starting" in (caught.value.details() or "")
    release.set()
    starter.join(10)
    assert _check(server.endpoint) == SERVING


def _can_connect(endpoint: str) -> bool:
    try:
        _check(endpoint)
    except grpc.RpcError:
        return False
    return True


def test_dead_service_and_shutdown_are_not_serving(server_parts: BrokerServer) -> None:
    server = server_parts
    server.start()
    assert _check(server.endpoint, MESSAGING_SERVICE) == SERVING
    server.broker.schedule.thread.failure = RuntimeError("schedule thread died")
    _wait_for(lambda: _check(server.endpoint, MESSAGING_SERVICE) == NOT_SERVING)
    assert _check(server.endpoint) == NOT_SERVING
    server.broker.schedule.thread.failure = None
    _wait_for(lambda: _check(server.endpoint) == SERVING)
    with grpc.insecure_channel(server.endpoint) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
        assert next(watch).status == SERVING
        stopper = threading.Thread(target=server.stop, args=(1.0,))
        stopper.start()
        assert next(watch).status == NOT_SERVING
        stopper.join(15)
