"""Fuzz every MessagingService RPC of one real broker process with bad requests.

Two kinds of input, for every RPC (Telemetry included):

* random bytes as the serialized request: gRPC itself refuses what does not parse
  (status INTERNAL, "Exception deserializing request!", the same in every gRPC
  implementation); what parses reaches the handler like any request;
* valid requests with 1..4 fields replaced by hostile values, built generically from the
  protobuf descriptors: empty, illegal and huge names, negative and extreme numbers,
  unknown enum values, oversized bodies, forged receipt handles, bad durations and
  timestamps, missing client ids.

Every answer must be a response whose statuses carry a defined v2 ``Code`` that is not
an internal error (a handler that fails on input is a bug: input errors have codes), or,
for unparsable bytes, that gRPC refusal. Afterwards the broker is alive, logged no
error, still serves what was stored before the fuzz byte for byte, takes a normal send
and pull, and, restarted, recovers without dropping anything.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess
from tests.chaos import load
from tests.server.conftest import start_broker

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
Draw = Callable[..., Any]  # hypothesis' draw, from @composite or st.data()
STREAM_DEADLINE_S = 3.0
UNARY_DEADLINE_S = 10.0


def budgets(short: int, full: int) -> list[Any]:
    return load.budgets(short, full, suppress=list(HealthCheck))


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


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    proc = start_broker(tmp_path_factory.mktemp("fuzz-grpc"), config=CONFIG)
    with RocketMQClient(proc.endpoint) as client:
        stored = store_reference_data(client)
    channel = grpc.insecure_channel(
        proc.endpoint,
        options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
        ],
    )
    handle, message_id = first_delivery(channel)
    yield Target(proc, channel, stored, handle, message_id)
    channel.close()
    if proc.process.poll() is None:
        stop_cleanly(proc)


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


# ---- request templates: one valid request per RPC -----------------------------------------


def resource(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def templates(t: Target) -> dict[str, Any]:
    """A valid request for every RPC (Telemetry: one command of its stream)."""
    s = service_pb2
    mq = pb.MessageQueue(topic=resource(TOPIC), id=0)
    endpoints = pb.Endpoints(
        scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)]
    )
    message = pb.Message(
        topic=resource("fz-sink"),
        body=b"fuzz",
        user_properties={"u": "1"},
        system_properties=pb.SystemProperties(
            message_id="FZ-1", tag="T", keys=["k"], message_type=pb.MessageType.NORMAL
        ),
    )
    settings_ = pb.Settings(
        client_type=pb.ClientType.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=resource(GROUP),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=resource(TOPIC),
                    expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
                )
            ],
        ),
    )
    requests = {
        "QueryRoute": s.QueryRouteRequest(topic=resource(TOPIC), endpoints=endpoints),
        "Heartbeat": s.HeartbeatRequest(
            group=resource(GROUP), client_type=pb.ClientType.SIMPLE_CONSUMER
        ),
        "SendMessage": s.SendMessageRequest(messages=[message]),
        "QueryAssignment": s.QueryAssignmentRequest(
            topic=resource(TOPIC), group=resource(GROUP), endpoints=endpoints
        ),
        "ReceiveMessage": s.ReceiveMessageRequest(
            group=resource(POP_GROUP),
            message_queue=pb.MessageQueue(topic=resource(POP_TOPIC)),
            batch_size=2,
            filter_expression=pb.FilterExpression(
                type=pb.FilterType.SQL, expression="a > 1 OR a IS NULL"
            ),
        ),
        "AckMessage": s.AckMessageRequest(
            group=resource(POP_GROUP),
            topic=resource(POP_TOPIC),
            entries=[s.AckMessageEntry(message_id=t.message_id, receipt_handle=t.receipt_handle)],
        ),
        "ForwardMessageToDeadLetterQueue": s.ForwardMessageToDeadLetterQueueRequest(
            group=resource(POP_GROUP),
            topic=resource(POP_TOPIC),
            receipt_handle=t.receipt_handle,
            message_id=t.message_id,
            delivery_attempt=1,
            max_delivery_attempts=3,
        ),
        "PullMessage": s.PullMessageRequest(
            group=resource(GROUP), message_queue=mq, offset=0, batch_size=8
        ),
        "UpdateOffset": s.UpdateOffsetRequest(
            group=resource("fz-offsets"), message_queue=mq, offset=5
        ),
        "GetOffset": s.GetOffsetRequest(group=resource(GROUP), message_queue=mq),
        "QueryOffset": s.QueryOffsetRequest(
            message_queue=mq, query_offset_policy=pb.QueryOffsetPolicy.TIMESTAMP
        ),
        "EndTransaction": s.EndTransactionRequest(
            topic=resource(TOPIC),
            message_id="FZ-TX",
            transaction_id="TX-1",
            resolution=pb.TransactionResolution.COMMIT,
            source=pb.TransactionSource.SOURCE_CLIENT,
        ),
        "Telemetry": s.TelemetryCommand(settings=settings_),
        "NotifyClientTermination": s.NotifyClientTerminationRequest(group=resource(GROUP)),
        "ChangeInvisibleDuration": s.ChangeInvisibleDurationRequest(
            group=resource(POP_GROUP),
            topic=resource(POP_TOPIC),
            receipt_handle=t.receipt_handle,
            message_id=t.message_id,
        ),
        "RecallMessage": s.RecallMessageRequest(topic=resource(TOPIC), recall_handle="FZ-RH"),
        "SyncLiteSubscription": s.SyncLiteSubscriptionRequest(),
    }
    requests["ReceiveMessage"].invisible_duration.FromMilliseconds(1_000)
    requests["ReceiveMessage"].long_polling_timeout.FromMilliseconds(0)
    requests["PullMessage"].long_polling_timeout.FromMilliseconds(0)
    requests["QueryOffset"].timestamp.FromMilliseconds(1)
    requests["ChangeInvisibleDuration"].invisible_duration.FromMilliseconds(60_000)
    return requests


# ---- hostile values, by field type --------------------------------------------------------

HOSTILE_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            TOPIC,
            GROUP,
            POP_TOPIC,
            POP_GROUP,
            "bad topic",
            "x" * 300,
            "%DLQ%" + GROUP,
            "%RETRY%" + GROUP,
            "rmq_sys_TRACE",
            "订单",
            "\x00",
            "a\x01b",
            "a\x02b",
            "a|b",
            "*",
            "||",
            "a > 1",
            "a >",
            "NOT",
            "SQL92",
            "0" * 40,
            "AQAAAAAAAAAAAAAAAAAAAAAA",
            "::1",
            "0.0.0.0",
        ]
    ),
    st.text(max_size=20),
)
HOSTILE_BYTES = st.one_of(
    st.sampled_from(
        [
            b"",
            b"\x00",
            b"\x1f\x8b\x08\x00junk",
            bytes(MAX_BODY_BYTES),
            bytes(MAX_BODY_BYTES + 1),
            bytes(300_000),
        ]
    ),
    st.binary(max_size=64),
)
FD = FieldDescriptor
S32, U32, S64, U64 = (-(2**31), 2**31 - 1), (0, 2**32 - 1), (-(2**63), 2**63 - 1), (0, 2**64 - 1)
INT_RANGES = {
    FD.TYPE_INT32: S32,
    FD.TYPE_SINT32: S32,
    FD.TYPE_SFIXED32: S32,
    FD.TYPE_UINT32: U32,
    FD.TYPE_FIXED32: U32,
    FD.TYPE_INT64: S64,
    FD.TYPE_SINT64: S64,
    FD.TYPE_SFIXED64: S64,
    FD.TYPE_UINT64: U64,
    FD.TYPE_FIXED64: U64,
}


def hostile_int(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [
        v
        for v in (0, 1, -1, 2, lo, hi, lo + 1, hi - 1, 10**9, -(10**9), 2**31, 2**32)
        if lo <= v <= hi
    ]
    return st.one_of(
        st.sampled_from(edges),
        st.integers(lo, hi),
        st.integers(-5, 100).filter(lambda v: lo <= v <= hi),
    )


def hostile_scalar(draw: Draw, fd: FieldDescriptor) -> Any:
    if fd.type == FieldDescriptor.TYPE_STRING:
        return draw(HOSTILE_TEXT)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return draw(HOSTILE_BYTES)
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return draw(st.booleans())
    if fd.type == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in fd.enum_type.values]
        return draw(st.one_of(st.sampled_from(known), st.sampled_from([-1, 99, 2**31 - 1])))
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return draw(st.sampled_from([0.0, -1.0, 1e300, float("inf"), float("nan"), 0.5]))
    return draw(hostile_int(*INT_RANGES[fd.type]))


def is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def mutate_field(draw: Draw, msg: Any, fd: FieldDescriptor, depth: int) -> None:
    """Replace, clear or extend one field of ``msg`` with hostile content."""
    if is_map(fd):
        field = getattr(msg, fd.name)
        if draw(st.booleans()):
            field.clear()
        for _ in range(draw(st.integers(0, 3))):
            field[draw(HOSTILE_TEXT)] = draw(HOSTILE_TEXT)
    elif fd.is_repeated:
        field = getattr(msg, fd.name)
        action = draw(st.sampled_from(["clear", "add", "mutate"]))
        if action == "clear":
            del field[:]
        elif fd.message_type is not None:
            item = field[0] if action == "mutate" and len(field) else field.add()
            mutate_message(draw, item, depth + 1)
        else:
            field.append(hostile_scalar(draw, fd))
    elif fd.message_type is not None:
        if depth >= 3 or draw(st.integers(0, 3)) == 0:
            msg.ClearField(fd.name)
        else:
            mutate_message(draw, getattr(msg, fd.name), depth + 1)
    else:
        setattr(msg, fd.name, hostile_scalar(draw, fd))


def mutate_message(draw: Draw, msg: Any, depth: int = 0) -> None:
    """1..3 edits of ``msg``: of any of its fields, or deeper inside one that is set."""
    fields = list(msg.DESCRIPTOR.fields)
    for _ in range(draw(st.integers(1, 3 if depth == 0 else 2))):
        present = [
            fd for fd, _ in msg.ListFields() if fd.message_type is not None and not fd.is_repeated
        ]
        if present and depth < 3 and draw(st.booleans()):  # keep the shape, break a detail
            mutate_message(draw, getattr(msg, draw(st.sampled_from(present)).name), depth + 1)
        elif fields:
            mutate_field(draw, msg, draw(st.sampled_from(fields)), depth)


METADATA = st.sampled_from(
    [
        [("x-mq-client-id", CLIENT_ID)],
        [("x-mq-client-id", "fuzz-other@2")],
        [],
        [("x-mq-client-id", "")],
        [("x-mq-client-id", "a" * 2000)],
    ]
)


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


# ---- the properties -----------------------------------------------------------------------


@pytest.mark.parametrize("budget", budgets(200, 6_000))
def test_random_bytes_are_refused_or_answered_with_a_code(target: Target, budget: settings) -> None:
    refusals = 0

    @budget
    @given(
        st.sampled_from(METHODS),
        st.binary(max_size=200),
        st.lists(st.binary(max_size=80), max_size=3),
        METADATA,
    )
    def check(
        method: str, payload: bytes, frames: list[bytes], metadata: list[tuple[str, str]]
    ) -> None:
        nonlocal refusals
        desc = SERVICE.methods_by_name[method]
        try:
            answers = call_raw(
                target, method, [payload, *frames] if desc.client_streaming else payload, metadata
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INTERNAL, (method, exc)
            assert "deserializing request" in (exc.details() or ""), (method, exc)
            refusals += 1
            return
        check_answers(method, answers)

    check()
    assert refusals > 0  # the random bytes did include undecodable requests
    assert_broker_sound(target)


@pytest.mark.parametrize("budget", budgets(300, 10_000))
def test_mutated_requests_get_a_proper_code(target: Target, budget: settings) -> None:
    base = templates(target)
    seen: dict[str, set[int]] = {}
    # Every method gets its share of the budget (a draw over all methods could leave one
    # out of a short run).
    share = settings(parent=budget, max_examples=max(5, budget.max_examples // len(METHODS)))

    def fuzz(method: str) -> None:
        @share
        @given(st.data(), METADATA)
        def check(data: st.DataObject, metadata: list[tuple[str, str]]) -> None:
            request = type(base[method])()
            request.CopyFrom(base[method])
            mutate_message(data.draw, request)
            payload = request.SerializeToString()
            frames = [
                payload,
                *([payload] if method == "Telemetry" and data.draw(st.booleans()) else []),
            ]
            codes = check_answers(
                method,
                call_raw(target, method, frames if method == "Telemetry" else payload, metadata),
            )
            seen.setdefault(method, set()).update(codes)

        check()

    for method in METHODS:
        fuzz(method)
    assert set(seen) == set(METHODS), sorted(set(METHODS) - set(seen))
    refused = {code for codes in seen.values() for code in codes} - {Code.OK}
    assert len(refused) >= 8, sorted(Code.Name(c) for c in refused)  # many distinct refusals
    assert_broker_sound(target)


def test_restart_after_the_fuzz_drops_nothing(target: Target, tmp_path: Path) -> None:
    """The store the fuzz ran against recovers cleanly and still holds the data."""
    stop_cleanly(target.proc)
    workdir = target.proc.store_dir.parent
    proc = start_broker(workdir, config=CONFIG)
    try:
        opened = [line for line in proc.output if "store opened:" in line]
        assert opened and "abnormal shutdown: False" in opened[0], opened
        assert "dropped" not in opened[0] and "rebuilt" not in opened[0], opened[0]
        target.proc = proc
        target.channel.close()
        target.channel = grpc.insecure_channel(proc.endpoint)
        assert_broker_sound(target)
    finally:
        stop_cleanly(proc)


def test_undecodable_telemetry_frames_do_not_wedge_shutdown(tmp_path: Path) -> None:
    """gRPC ends such a call itself; the handler must not leave it unfinished (a SIGTERM
    then waited forever for it: grpcio sends a second status the core refuses)."""
    proc = start_broker(tmp_path)
    try:
        with grpc.insecure_channel(proc.endpoint) as channel:
            telemetry = channel.stream_stream(f"/{SERVICE.full_name}/Telemetry")
            for frames in ([b"\xff"], [b"\x1f\x84"] * 3, [b"\x0a\x05\xff"]) * 4:
                with pytest.raises(grpc.RpcError) as refused:
                    list(
                        telemetry(
                            iter(frames),
                            timeout=STREAM_DEADLINE_S,
                            metadata=[("x-mq-client-id", CLIENT_ID)],
                        )
                    )
                assert refused.value.code() == grpc.StatusCode.INTERNAL
    finally:
        stop_cleanly(proc, timeout_s=15)
    assert any("stopped cleanly" in line for line in proc.output)


TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())


@pytest.mark.skipif(sys.platform != "linux" or TGKILL is None, reason="needs Linux tgkill")
def test_sigterm_taken_by_any_thread_stops_the_broker(tmp_path: Path) -> None:
    """The kernel gives a process-directed SIGTERM to any thread that does not block it;
    under load that is often a gRPC thread. One such SIGTERM hung a broker in the slow
    corrupt-files run; tgkill makes the case deterministic."""
    proc = start_broker(tmp_path)
    pid = proc.process.pid
    names = {
        int(t): Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
        for t in os.listdir(f"/proc/{pid}/task")
    }
    grpc_threads = [t for t, name in names.items() if name.startswith(("grpc", "event_engine"))]
    wait_until_idle(pid)  # else the main thread may still see the signal on its way to wait
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(TGKILL, pid, grpc_threads[0], signal.SIGTERM) == 0
    try:
        assert proc.process.wait(3) == 0  # a clean stop takes well under a second
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the broker ignored a SIGTERM taken by a non-main thread")


def wait_until_idle(pid: int, steady_polls: int = 20) -> None:
    """Until the main thread has sat in a futex wait (its ``stop.wait()``) for a while."""
    deadline, steady = time.monotonic() + 10, 0
    while steady < steady_polls:
        assert time.monotonic() < deadline, "the broker's main thread never went idle"
        steady = steady + 1 if "futex" in Path(f"/proc/{pid}/wchan").read_text() else 0
        time.sleep(0.01)
