"""npm ``ali-ons`` (a pure JavaScript RocketMQ 4.x remoting client) through our NameServer
and broker: ``node tests/external/node/produce_consume.js`` sends, then push-consumes."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

from broker_core.client.client import RocketMQClient
from tests.external.conftest import Cluster4x
from tests.external.test_cpp_client import create_topic


def test_ali_ons_producer_and_consumer(node_dir: Path, cluster4x: Cluster4x) -> None:
    create_topic(cluster4x, "js-topic")
    done = subprocess.run(
        ["node", "produce_consume.js", cluster4x.namesrv, "js-topic", "js-group", "50"],
        cwd=node_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sent = [x for x in lines if "sent" in x]
    assert len(sent) == 50 and all(x["status"] == "SEND_OK" for x in sent), sent[:3]
    got = Counter(x["got"] for x in lines if "got" in x)
    assert set(got) == {f"js-{i}" for i in range(50)}
    assert {x["tags"] for x in lines if "got" in x} == {"TagA", "TagB"}
    with RocketMQClient(cluster4x.grpc) as client:  # what ali-ons sent, read over gRPC
        bodies = {
            m.body
            for q in range(4)
            for m in client.pull("js-reader", "js-topic", q, 0, 100).messages
        }
    assert bodies == {f"js-{i}".encode() for i in range(50)}
