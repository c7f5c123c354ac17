"""The broker process itself: it starts, answers, and stops cleanly on SIGTERM."""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from tests.server.conftest import BrokerProcess


def test_sigterm_stops_the_broker_cleanly(tmp_path) -> None:
    from tests.server.conftest import start_broker

    proc = start_broker(tmp_path)
    assert proc.stop() == 0
    assert any("stopped cleanly" in line for line in proc.output)
    assert not (proc.store_dir / "abort").exists()


def test_unknown_rpc_answers_are_statuses_not_crashes(broker_process: BrokerProcess) -> None:
    with grpc.insecure_channel(broker_process.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply = stub.SyncLiteSubscription(service_pb2.SyncLiteSubscriptionRequest(), timeout=5)
        assert reply.status.code == definition_pb2.Code.ILLEGAL_CONSUMER_GROUP
        assert "group" in reply.status.message
