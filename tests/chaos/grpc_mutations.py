"""What the gRPC fuzz (``test_fuzz_grpc.py``) sends: one valid request per RPC and
hostile edits of it, drawn generically from the protobuf descriptors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from tests.chaos.grpc_fuzz import (
    CLIENT_ID,
    GROUP,
    MAX_BODY_BYTES,
    POP_GROUP,
    POP_TOPIC,
    TOPIC,
    Target,
)

Draw = Callable[..., Any]  # hypothesis' draw, from @composite or st.data()


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
