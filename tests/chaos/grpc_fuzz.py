"""The broker of the gRPC fuzz (``test_fuzz_grpc*``) and how its calls are made and checked.

:class:`Target` is one broker process with data stored before the fuzz; ``call_raw`` makes
any MessagingService call from serialized bytes, ``check_answers`` checks each status of the
answers, ``assert_broker_sound`` checks the broker after the fuzz.
"""

from __future__ import annotations

import subprocess
import zlib
from dataclasses import dataclass

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess

Code = pb.Code
SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
METHODS = sorted(m.name for m in SERVICE.methods)
BAD_CODES = {Code.CODE_UNSPECIFIED, Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR}
MAX_BODY_BYTES = 64 << 10
CONFIG = {
    "store": {
        "max_body_bytes": MAX_BODY_BYTES,
        "max_properties_bytes": 16 << 10,
        "segment_size_bytes": 4 << 20,
    }
}
TOPIC, GROUP, POP_TOPIC, POP_GROUP = "fz-orders", "fz-group", "fz-pop", "fz-pop-group"
AFTER_TOPIC = "fz-after"  # one queue: where the after-fuzz send must land
CLIENT_ID = "fuzz-client@1"
STREAM_DEADLINE_S = 3.0
UNARY_DEADLINE_S = 10.0


# ---- the broker and what it held before the fuzz ------------------------------------------


@dataclass
class Target:
    proc: BrokerProcess
    channel: grpc.Channel
    stored: list[tuple[int, int, bytes]]  # (queue id, queue offset, body) sent before the fuzz
    receipt_handle: str
    message_id: str


def store_reference_data(client: RocketMQClient) -> list[tuple[int, int, bytes]]:
    client.create_topic(TOPIC, queues=2)
    client.create_topic(POP_TOPIC, queues=1)
    client.create_topic(AFTER_TOPIC, queues=1)
    client.create_group(GROUP)
    client.create_group(POP_GROUP, consume_from_where="first_offset")  # reads what came before
    bodies = [zlib.crc32(bytes([i])).to_bytes(4, "big") * (i + 1) for i in range(40)]
    client.send_batch(POP_TOPIC, [b"pop-1", b"pop-2"])
    client.send_batch(TOPIC, [(body, "T", [f"k-{i}"]) for i, body in enumerate(bodies)])
    stored = []
    for qid in (0, 1):
        batch = client.pull(GROUP, TOPIC, qid, 0, 64, with_bounds=False)
        stored += [(qid, m.queue_offset, m.body) for m in batch.messages]
    assert sorted(b for _, _, b in stored) == sorted(bodies)
    return stored


def first_delivery(channel: grpc.Channel) -> tuple[str, str]:
    """(receipt handle, message id) of a real POP delivery, for the templates."""
    request = service_pb2.ReceiveMessageRequest(
        group=pb.Resource(name=POP_GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=POP_TOPIC)),
        batch_size=1,
    )
    request.invisible_duration.FromMilliseconds(60_000)
    request.long_polling_timeout.FromMilliseconds(0)
    call = channel.unary_stream(
        f"/{SERVICE.full_name}/ReceiveMessage",
        request_serializer=service_pb2.ReceiveMessageRequest.SerializeToString,
        response_deserializer=service_pb2.ReceiveMessageResponse.FromString,
    )
    answers = call(request, timeout=10, metadata=[("x-mq-client-id", CLIENT_ID)])
    messages = [r.message for r in answers if r.WhichOneof("content") == "message"]
    assert messages, "the POP topic delivered nothing"
    props = messages[0].system_properties
    return props.receipt_handle, props.message_id


def stop_cleanly(proc: BrokerProcess, timeout_s: float = 30) -> None:
    """SIGTERM and expect exit code 0; a broker that hangs is killed, then the test fails."""
    try:
        code = proc.stop(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(
            f"the broker did not stop {timeout_s} s after SIGTERM:\n" + "".join(proc.output[-30:])
        )
    assert code == 0, "".join(proc.output[-30:])


# ---- calling and checking -----------------------------------------------------------------


def call_raw(
    t: Target, method: str, payload: bytes | list[bytes], metadata: list[tuple[str, str]]
) -> list[bytes]:
    """Serialized responses of one call, whatever its kind; gRPC errors propagate."""
    path = f"/{SERVICE.full_name}/{method}"
    desc = SERVICE.methods_by_name[method]
    if desc.client_streaming:
        frames = payload if isinstance(payload, list) else [payload]
        call = t.channel.stream_stream(path)
        return list(call(iter(frames), timeout=STREAM_DEADLINE_S, metadata=metadata))
    assert isinstance(payload, bytes)
    if desc.server_streaming:
        return list(
            t.channel.unary_stream(path)(payload, timeout=STREAM_DEADLINE_S, metadata=metadata)
        )
    return [t.channel.unary_unary(path)(payload, timeout=UNARY_DEADLINE_S, metadata=metadata)]


def check_answers(method: str, raw_responses: list[bytes]) -> list[int]:
    """Parse each response and check every status in it; returns the status codes."""
    response_class = service_pb2.__dict__[SERVICE.methods_by_name[method].output_type.name]
    codes = []
    for raw in raw_responses:
        response = response_class.FromString(raw)
        statuses = [response.status] if response.HasField("status") else []
        statuses += [e.status for e in getattr(response, "entries", ()) if e.HasField("status")]
        for status in statuses:
            assert status.code in Code.values(), (method, status)
            assert status.code not in BAD_CODES, (method, status)
            assert status.message, (method, status)
            codes.append(status.code)
    desc = SERVICE.methods_by_name[method]
    if not desc.client_streaming:
        assert codes, f"{method} answered without a status"
    return codes


def assert_broker_sound(t: Target) -> None:
    """Alive, no handler failure logged, old data intact, a new send and pull work."""
    assert t.proc.process.poll() is None, "".join(t.proc.output[-40:])
    # gRPC logs each undecodable request as an ERROR of its own (grpc._common); ours are bugs.
    errors = [line for line in t.proc.output if " ERROR broker_core" in line]
    assert not errors, "".join(errors[:20])
    with RocketMQClient(t.proc.endpoint) as client:
        for qid in (0, 1):
            old = [(q, o, b) for q, o, b in t.stored if q == qid]
            batch = client.pull(GROUP, TOPIC, qid, 0, len(old), with_bounds=False)
            assert [(qid, m.queue_offset, m.body) for m in batch.messages] == old
        receipt = client.send(AFTER_TOPIC, b"still works", tag="T")
        [again] = client.pull(GROUP, AFTER_TOPIC, 0, receipt.offset, 1, with_bounds=False).messages
        assert again.body == b"still works"
