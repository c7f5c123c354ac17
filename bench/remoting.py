"""remoting: 4.x remoting produce and pull throughput vs gRPC on the same broker, same run.

One broker process serves both protocols (``--remoting-listen``). Produce: one client
process sends batches of 256 messages of 128 B one after the other: over remoting as
SEND_BATCH_MESSAGE (``MessageDecoder`` batch body, our ``RemotingClient``), over gRPC as
``RocketMQClient.send_batch``; rounds alternate (remoting, gRPC, remoting, ...) so drift on
a shared machine hits both alike; the figure is each side's best round. Pull: the same
backlog (4 queues; the first ``DRAIN`` messages of each) is read by offset pulls of up
to ``PULL_BATCH`` messages, over
remoting (PULL_MESSAGE, bodies re-encoded into ``MessageDecoder`` records and decoded by
the client as a 4.x client must) and over gRPC (``RocketMQClient.pull``), alternating.

The main figure is remoting produce msg/s over gRPC produce msg/s; the pull figures and
their ratio are in the details. The goal (0.8) asks the 4.x path to stay close to gRPC.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.message import new_message_id
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode
from broker_core.remoting.command import RemotingCommand
from broker_core.server.launcher import launch_broker
from tests.remoting_records import decode_stored, encode_batch

BATCH = 256
BODY_BYTES = 128
QUEUES = 4
PULL_BATCH = 512
SIZES = {"tiny": (8, 2), "full": (200, 5)}  # batches per produce round, rounds
DRAIN = {"tiny": 2_048, "full": 50_000}  # messages read from each queue per drain


def _remoting_send_rate(client: RemotingClient, topic: str, batches: int) -> float:
    payload = bytes(range(BODY_BYTES))
    fields = {"a": "bench", "b": topic, "f": "0", "g": "0", "h": "0", "i": "", "m": "true"}
    start = time.perf_counter()
    for i in range(batches):  # a 4.x producer picks the queue of each send: round robin
        # and gives every message of a batch its own UNIQ_KEY (MessageClientIDSetter), as
        # RocketMQClient gives each message of send_batch an id: encoded per send, timed
        body = encode_batch(
            [(0, payload, {"TAGS": "b", "UNIQ_KEY": new_message_id()}) for _ in range(BATCH)]
        )
        resp = client.invoke(
            RemotingCommand.request(
                RequestCode.SEND_BATCH_MESSAGE, {**fields, "e": str(i % QUEUES)}, body
            ),
            30.0,
        )
        assert resp.code == 0, resp.remark
    return batches * BATCH / (time.perf_counter() - start)


def _grpc_send_rate(client: RocketMQClient, topic: str, batches: int) -> float:
    body = bytes(range(BODY_BYTES))
    start = time.perf_counter()
    for _ in range(batches):
        client.send_batch(topic, [body] * BATCH)
    return batches * BATCH / (time.perf_counter() - start)


def _remoting_drain(client: RemotingClient, topic: str, per_queue: int) -> float:
    """Read the first ``per_queue`` messages of every queue; msg/s."""
    got, start = 0, time.perf_counter()
    for queue_id in range(QUEUES):
        offset = 0
        while offset < per_queue:
            count = min(PULL_BATCH, per_queue - offset)
            resp = client.invoke(
                RemotingCommand.request(
                    RequestCode.PULL_MESSAGE,
                    {
                        "consumerGroup": "bench-r",
                        "topic": topic,
                        "queueId": str(queue_id),
                        "queueOffset": str(offset),
                        "maxMsgNums": str(count),
                        "sysFlag": "0",
                    },
                ),
                30.0,
            )
            if resp.code != 0:
                break
            got += len(decode_stored(resp.body))
            offset = int(resp.ext_fields["nextBeginOffset"])
    assert got == per_queue * QUEUES, (got, per_queue)
    return got / (time.perf_counter() - start)


def _grpc_drain(client: RocketMQClient, topic: str, per_queue: int) -> float:
    got, start = 0, time.perf_counter()
    for queue_id in range(QUEUES):
        offset = 0
        while offset < per_queue:
            batch = client.pull(
                "bench-g", topic, queue_id, offset, min(PULL_BATCH, per_queue - offset)
            )
            if not batch.messages:
                break
            got += len(batch.messages)
            offset = batch.messages[-1].queue_offset + 1
    assert got == per_queue * QUEUES, (got, per_queue)
    return got / (time.perf_counter() - start)


def _measure(grpc_addr: str, remoting_addr: str, size: str) -> dict[str, float]:
    batches, rounds = SIZES[size]
    remote = RemotingClient(remoting_addr, 30.0)
    try:
        with RocketMQClient(grpc_addr) as grpc_client:
            grpc_client.create_topic("bench-remoting", queues=QUEUES)
            _remoting_send_rate(remote, "bench-remoting", 2)  # warm-up
            _grpc_send_rate(grpc_client, "bench-remoting", 2)
            sends_r, sends_g = [], []
            for _ in range(rounds):
                sends_r.append(_remoting_send_rate(remote, "bench-remoting", batches))
                sends_g.append(_grpc_send_rate(grpc_client, "bench-remoting", batches))
            status = grpc_client.topic_status("bench-remoting")
            per_queue = min(DRAIN[size], *(q["max_offset"] for q in status))
            pulls_r, pulls_g = [], []
            for _ in range(max(2, rounds // 2)):
                pulls_r.append(_remoting_drain(remote, "bench-remoting", per_queue))
                pulls_g.append(_grpc_drain(grpc_client, "bench-remoting", per_queue))
    finally:
        remote.close()
    return {
        "send_r": max(sends_r),
        "send_g": max(sends_g),
        "pull_r": max(pulls_r),
        "pull_g": max(pulls_g),
        "backlog": per_queue * QUEUES,
    }


def run(size: str) -> list[Result]:
    root = Path(tempfile.mkdtemp(prefix="bench-remoting-"))
    proc = launch_broker(root, extra_args=["--remoting-listen", "127.0.0.1:0"])
    try:
        line = next(x for x in proc.output if "remoting (4.x clients) on" in x)
        m = _measure(proc.endpoint, line.rsplit(" ", 1)[1].strip(), size)
    finally:
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    pull_ratio = m["pull_r"] / m["pull_g"]
    result = Result(
        "remoting",
        m["send_r"],
        m["send_g"],
        "msg/s",
        goal=0.8,
        baseline_name="gRPC",
        details={
            "batch": BATCH,
            "body_bytes": BODY_BYTES,
            "batches_per_round": SIZES[size][0],
            "rounds": SIZES[size][1],
            "pull_batch": PULL_BATCH,
            "pulled_per_drain": int(m["backlog"]),
            "remoting_pull_msg_s": round(m["pull_r"]),
            "grpc_pull_msg_s": round(m["pull_g"]),
            "pull_ratio": round(pull_ratio, 3),
        },
    )
    result.rows = [
        ("remoting produce", f"{m['send_r']:,.0f}", f"msg/s (gRPC {m['send_g']:,.0f})"),
        ("remoting pull", f"{m['pull_r']:,.0f}", f"msg/s (gRPC {m['pull_g']:,.0f})"),
    ]
    return [result]
