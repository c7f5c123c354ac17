"""Fuzzed and forged authorization headers never authenticate and never hurt the broker.

Every call goes to a real broker with authentication on; each must come back
UNAUTHORIZED (never OK, never a crash), and the broker must still answer a correctly
signed call and report SERVING afterwards.
"""

from __future__ import annotations

import string
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.auth.signature import authorization, sign, utc_stamp
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET

Code = pb.Code
PRINTABLE = st.text(
    alphabet=string.ascii_letters + string.digits + string.punctuation + " ", max_size=300
)  # gRPC metadata values are printable ASCII


def _forged() -> st.SearchStrategy[tuple[str, str]]:
    """(x-mq-date-time, authorization) pairs that must never authenticate."""
    now = utc_stamp()
    good_sig = sign(ADMIN_SECRET, now)
    old = utc_stamp(time.time() - 3 * 86_400)
    structured = st.sampled_from(
        [
            (now, authorization(ADMIN_KEY, "not-the-secret", now)),  # wrong secret
            (now, authorization("ghost", ADMIN_SECRET, now)),  # unknown key
            (old, authorization(ADMIN_KEY, ADMIN_SECRET, old)),  # replayed old date
            (now, authorization(ADMIN_KEY, ADMIN_SECRET, old)),  # signature of another date
            (
                now,
                f"MQv2-HMAC-SHA256 Credential={ADMIN_KEY}, SignedHeaders=x-mq-date-time, "
                f"Signature={good_sig}",
            ),  # wrong algorithm
            (now, f"MQv2-HMAC-SHA1 Credential={ADMIN_KEY}, Signature={good_sig}"),
            (now, f"MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature={good_sig}"),
            (now, f"MQv2-HMAC-SHA1 Credential={ADMIN_KEY}, SignedHeaders=x-mq-date-time"),
            (
                now,
                f"MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature={good_sig}",
            ),
            (
                now,
                f"MQv2-HMAC-SHA1 Credential={ADMIN_KEY}, SignedHeaders=x-mq-date-time, "
                f"Signature={good_sig[:-1]}",
            ),  # truncated
            (now + "0", authorization(ADMIN_KEY, ADMIN_SECRET, now + "0")),  # malformed date
            ("", authorization(ADMIN_KEY, ADMIN_SECRET, "")),
        ]
    )
    mutated_sig = (
        st.text(alphabet="0123456789abcdef", min_size=0, max_size=60)
        .filter(lambda s: s != good_sig)
        .map(
            lambda s: (
                now,
                f"MQv2-HMAC-SHA1 Credential={ADMIN_KEY}, "
                f"SignedHeaders=x-mq-date-time, Signature={s}",
            )
        )
    )
    random = st.tuples(PRINTABLE, PRINTABLE)
    prefixed = PRINTABLE.map(lambda s: (now, "MQv2-HMAC-SHA1 " + s))
    return st.one_of(structured, mutated_sig, random, prefixed)


@pytest.fixture(scope="module")
def stub(auth_broker):
    with grpc.insecure_channel(auth_broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel), channel


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pair=_forged(), which=st.sampled_from(["QueryRoute", "SendMessage", "Heartbeat"]))
def test_forged_headers_never_authenticate(stub, pair, which) -> None:
    messaging, _ = stub
    date_time, header = pair
    metadata = [("authorization", header), ("x-mq-client-id", "fuzz@1")]
    metadata += [("x-mq-date-time", date_time)] if date_time else []
    if which == "QueryRoute":
        reply = messaging.QueryRoute(
            service_pb2.QueryRouteRequest(topic=pb.Resource(name="fuzz")),
            metadata=metadata,
            timeout=5,
        )
    elif which == "SendMessage":
        reply = messaging.SendMessage(
            service_pb2.SendMessageRequest(
                messages=[pb.Message(topic=pb.Resource(name="fuzz"), body=b"x")]
            ),
            metadata=metadata,
            timeout=5,
        )
    else:
        reply = messaging.Heartbeat(service_pb2.HeartbeatRequest(), metadata=metadata, timeout=5)
    assert reply.status.code == Code.UNAUTHORIZED, (pair, reply.status)


def test_broker_survives_and_still_authenticates(stub, auth_broker) -> None:
    messaging, channel = stub
    now = utc_stamp()
    good = [
        ("x-mq-date-time", now),
        ("x-mq-client-id", "fuzz@1"),
        ("authorization", authorization(ADMIN_KEY, ADMIN_SECRET, now)),
    ]
    reply = messaging.Heartbeat(service_pb2.HeartbeatRequest(), metadata=good, timeout=5)
    assert reply.status.code == Code.OK
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert auth_broker.process.poll() is None
    assert not any("Traceback" in line for line in auth_broker.output)
