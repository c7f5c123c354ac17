"""``--no-extensions``: the broker serves ``apache.rocketmq.v2`` and gRPC health only, so it
looks like any RocketMQ 5 gRPC endpoint (proxy) to a client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core import cli
from broker_core.protocol.status import Code
from broker_core.server import main, options
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.server.conftest import DEFAULT_CONFIG


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = launch_broker(
        tmp_path_factory.mktemp("plain"), config=DEFAULT_CONFIG, extra_args=["--no-extensions"]
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-30:])


@pytest.fixture
def channel(plain: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(plain.endpoint) as ch:
        yield ch


@pytest.mark.parametrize("path", ["/rmq.admin.v1.Admin/Health", "/rmq.bulk.v1.Bulk/PullRaw"])
def test_our_services_are_unimplemented(channel: grpc.Channel, path: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary(path)(b"{}", timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_v2_and_health_are_served(channel: grpc.Channel) -> None:
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    request = service_pb2.QueryRouteRequest()
    request.topic.name = "no-such-topic"
    answer: Any = stub.QueryRoute(request, timeout=10)
    assert answer.status.code == Code.TOPIC_NOT_FOUND  # answered by the v2 service
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_flag_is_off_by_default() -> None:
    assert options.parse_args(["--no-extensions"]).no_extensions
    assert not options.parse_args([]).no_extensions


def test_rmq_broker_start_passes_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(main, "run", lambda argv: seen.append(list(argv)) or 0)
    result = CliRunner().invoke(cli.cli, ["broker", "start", "--no-extensions"])
    assert result.exit_code == 0, result.output
    assert "--no-extensions" in seen[0]
    CliRunner().invoke(cli.cli, ["broker", "start"])
    assert "--no-extensions" not in seen[1]
