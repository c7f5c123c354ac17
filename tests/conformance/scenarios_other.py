"""Node.js gRPC client (rocketmq-client-nodejs, ``tests/external/grpc_node/interop.js``)
and C++ client (PyPI ``rocketmq`` 0.4.4, ``tests/external/cpp/*.py``) scenarios.

The Node client talks to each broker's gRPC endpoint; the C++ client to its NameServer
and remoting port. Each scenario returns what the client's user sees, normalised."""

from __future__ import annotations

from typing import Any

from tests.conformance.registry import Observation, scenario
from tests.conformance.targets import Target

# ---- Node.js gRPC client --------------------------------------------------------------


def _node_failed(answer: dict[str, Any]) -> object:
    return answer.get("failed")


@scenario("node", "Producer send 4 (tags a/b), SimpleConsumer receive + ack")
def node_send_consume(t: Target) -> Observation:
    t.topic("NodeSC")
    t.group("GNodeSC")
    sent = t.node("produce", "NodeSC", "GNodeSC", "4")
    got = t.node("consume", "NodeSC", "GNodeSC", "4")
    return {
        "sent": len(sent.get("sent", [])),
        "received": sorted((m["body"], m["tag"]) for m in got.get("got", [])),
        "failed": _node_failed(sent) or _node_failed(got),
    }


@scenario("node", "FIFO: 3 message groups through a FIFO group, order kept per group")
def node_fifo(t: Target) -> Observation:
    t.topic("NodeFifo", 4, "-o", "true", "-a", "+message.type=FIFO")
    t.group("GNodeFifo", "-o", "true")
    answer = t.node("fifo", "NodeFifo", "GNodeFifo", "6")
    per_group: dict[str, list[str]] = {}
    for m in answer.get("got", []):
        per_group.setdefault(str(m["group"]), []).append(m["body"])
    return {"per_group": per_group, "failed": _node_failed(answer)}


# ---- C++ client (4.x remoting) ----------------------------------------------------------


@scenario("cpp", "send_sync 6, push consumer (new group, started after) receives all")
def cpp_send_push(t: Target) -> Observation:
    t.topic("CppPush")
    sent = t.cpp("produce", "CppPush", "6")
    got = t.cpp_consumer("CppPush", "GCppPush").take(6, 60)
    return {
        "statuses": sorted({s["status"] for s in sent}),
        "received": sorted(str(m["body"]) for m in got),
    }


@scenario("cpp", "send_batch 6 (batches of 3), then a PullConsumer reads tag TagA from 0")
def cpp_batch_pull(t: Target) -> Observation:
    t.topic("CppBatch", 2)
    sent = t.cpp("batch_and_pull", "CppBatch", "6", "3")
    # A pull answers what the broker has dispatched by then: RocketMQ's pull right after
    # the send (same script) once found nothing yet. A second run sends nothing, pulls all.
    lines = t.cpp("batch_and_pull", "CppBatch", "0", "3")
    return {
        "batches": [(s["batch"], s["status"]) for s in sent if "batch" in s],
        "pulled": sorted(str(m["body"]) for m in lines if "body" in m),
    }


@scenario("cpp", "push consumer with tag expression TagB")
def cpp_tag_push(t: Target) -> Observation:
    t.topic("CppTag")
    t.cpp("produce", "CppTag", "6")
    got = t.cpp_consumer("CppTag", "GCppTag", "--expression", "TagB").take(1, 60, settle_s=3)
    return {"received": sorted((str(m["body"]), str(m["tags"])) for m in got)}


@scenario("cpp", "send_orderly by key (2 keys), orderly push consumer keeps per-key order")
def cpp_orderly(t: Target) -> Observation:
    t.topic("CppOrder")
    t.cpp("produce", "CppOrder", "8", "--orderly-keys", "2")
    got = t.cpp_consumer("CppOrder", "GCppOrder", "--orderly").take(8, 60)
    per_key: dict[str, list[str]] = {}
    for m in got:
        body = str(m["body"])
        per_key.setdefault(str(int(body.rsplit("-", 1)[1]) % 2), []).append(body)
    return {"per_key": per_key}


@scenario("cpp", "RECONSUME_LATER once: redelivered from the retry topic after ~10 s")
def cpp_retry(t: Target) -> Observation:
    t.topic("CppRetry")
    t.cpp("produce", "CppRetry", "1", "--body-prefix", "fail")
    got = t.cpp_consumer("CppRetry", "GCppRetry", "--fail-prefix", "fail").take(2, 90)
    first_two = got[:2]
    gap = first_two[1]["t"] - first_two[0]["t"] if len(first_two) == 2 else None
    return {
        "deliveries": [(str(m["body"]), m["reconsume"]) for m in first_two],
        "redelivered_after_9s": None if gap is None else gap >= 9,
    }
