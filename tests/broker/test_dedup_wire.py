"""Idempotent sends over the wire, against a real broker process: the same message id sent
twice with gRPC SendMessage (one message, and a batch on the column lane) and SendBulk is
stored once and both answers carry the same offset; an answer lost after the store (a TCP
proxy swallows it) is retried by the official Python client and stored once; a broker
SIGKILLed after the write answers the retry from the log it recovered. Both scenarios also
run against a broker with the window off, where the retry is stored a second time: the
control that shows they can fail. The remoting front
end (SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE) is in ``test_dedup_remoting.py``."""

from __future__ import annotations

import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.broker.dedup_window import CPU_SAMPLE
from broker_core.client.bulk import SEND_PATH
from broker_core.protocol.bulk_send import decode_response, encode_request
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.security.conftest import metrics_url
from tests.security.test_metrics import scrape, value
from tests.server.admin_calls import TIMEOUT_S, admin_call, topic_total
from tests.server.conftest import DEFAULT_CONFIG

Code = pb.Code


class SwallowingProxy:
    """A loopback TCP proxy to the broker. Armed with ``marker``, it forwards the client's
    request that carries it, then drops the broker's first frame of more than a few
    control bytes that comes once ``stored()`` says the send was stored, and cuts the
    connection: the send was stored, its answer lost.

    Waiting for ``stored()`` matters: a frame of another call on the same connection (the
    telemetry stream) may come first, and cutting then resets the broker's socket while
    the request may still sit unread in it — Linux drops unread data on a reset — so the
    send would be lost rather than its answer (a run saw 1 message with dedup off)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.upstream: tuple[str, int] = ("", 0)
        self.marker = b""
        self.armed = False
        self.swallowed = threading.Event()
        self.stored: Callable[[], bool] = lambda: True
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_broker: bool) -> None:
        try:
            while data := src.recv(65536):
                if to_broker and self.marker and self.marker in data:
                    self.armed, self.marker = True, b""
                # control frames (window updates, pings, settings) are < 30 bytes
                if not to_broker and self.armed and len(data) >= 30:
                    wait_until(self.stored, "the marked send stored before its answer is cut")
                    self.armed = False
                    self.swallowed.set()
                    for sock in (src, dst):
                        sock.shutdown(socket.SHUT_RDWR)
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                sock.close()

    def close(self) -> None:
        self.listener.close()
        for sock in self._sockets:
            sock.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[SwallowingProxy]:
    p = SwallowingProxy()
    yield p
    p.close()


OFF = {**DEFAULT_CONFIG, "broker": {**DEFAULT_CONFIG["broker"], "dedup_window_ms": 0}}


def start(
    workdir: Path, *extra: str, listen: str = "127.0.0.1:0", dedup: bool = True
) -> BrokerProcess:
    config = DEFAULT_CONFIG if dedup else OFF
    return launch_broker(workdir, config=config, listen=listen, extra_args=extra)


def proxied(workdir: Path, proxy: SwallowingProxy, dedup: bool = True) -> BrokerProcess:
    """A broker whose routes name ``proxy``, so clients reach it through it (``endpoint``
    is the broker's own address)."""
    with socket.socket() as probe:  # a free port the broker listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proxy.upstream = ("127.0.0.1", port)
    extra = ("--advertise", proxy.address, "--metrics-listen", "127.0.0.1:0")
    proc = start(workdir, *extra, listen=f"127.0.0.1:{port}", dedup=dedup)
    proc.endpoint = f"127.0.0.1:{port}"
    return proc


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, proxy: SwallowingProxy) -> Iterator[Any]:
    """The module's broker (dedup on, the default), behind ``proxy``."""
    proc = proxied(tmp_path_factory.mktemp("dedup"), proxy)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll ``check`` (a broker state the test awaits) until true; AssertionError naming
    ``what`` after ``timeout_s`` (a hang guard, not a pass mark)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def proto(topic: str, message_id: str, body: bytes = b"body") -> Any:
    sp = pb.SystemProperties(message_id=message_id, message_type=pb.MessageType.NORMAL)
    sp.body_digest.type = pb.DigestType.CRC32
    sp.body_digest.checksum = f"{zlib.crc32(body):08X}"
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp)


def send_message(endpoint: str, *messages: Any) -> list[tuple[str, int]]:
    """SendMessage straight to the broker: (message id, offset) of each entry."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.SendMessageRequest(messages=list(messages))
        reply = stub.SendMessage(request, metadata=[("x-mq-client-id", "raw")], timeout=TIMEOUT_S)
    assert reply.status.code == Code.OK, reply.status
    return [(e.message_id, e.offset) for e in reply.entries]


@pytest.mark.parametrize("count", [1, 40])  # the general path, and the column lane
def test_send_message_twice_is_stored_once(broker: BrokerProcess, count: int) -> None:
    topic = f"dup-send-{count}"
    messages = [proto(topic, f"SEND-{count}-{i}") for i in range(count)]
    first = send_message(broker.endpoint, *messages)
    again = send_message(broker.endpoint, *messages)
    assert again == first
    assert topic_total(broker.endpoint, topic) == count


def send_bulk(endpoint: str, topic: str, ids: list[str]) -> list[int]:
    frame = encode_request(
        topic,
        [b"bulk"] * len(ids),
        [f"UNIQ_KEY\x01{i}\x02".encode() for i in ids],
        born_timestamp_ms=int(time.time() * 1000),
        born_host="127.0.0.1",
    )
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(SEND_PATH)
        status, offsets = decode_response(call(frame, timeout=TIMEOUT_S))
    assert status["code"] == Code.OK, status
    return offsets


def test_send_bulk_twice_is_stored_once(broker: BrokerProcess) -> None:
    ids = [f"BULK-{i}" for i in range(100)]
    first = send_bulk(broker.endpoint, "dup-bulk", ids)
    assert send_bulk(broker.endpoint, "dup-bulk", ids) == first
    partly = send_bulk(broker.endpoint, "dup-bulk", ["BULK-NEW", *ids[:3]])
    assert partly[1:] == first[:3]
    assert topic_total(broker.endpoint, "dup-bulk") == 101


def lose_an_answer(proc: BrokerProcess, proxy: SwallowingProxy, topic: str) -> str:
    """Send one message with the official client through ``proxy``, which swallows the
    answer after the store: the client retries it (same id). Returns its id."""
    admin_call(proc.endpoint, "CreateTopic", name=topic)  # clients never create one
    proxy.stored = lambda: topic_total(proc.endpoint, topic) >= 1
    config = ClientConfiguration(proxy.address, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        body = b"answer-lost-" + str(time.time_ns()).encode()
        proxy.marker = body
        msg = Message()
        msg.topic, msg.body = topic, body
        receipt = producer.send(msg)  # its first answer is swallowed: the client retries
    finally:
        producer.shutdown()
    assert proxy.swallowed.is_set(), "the proxy never dropped an answer"
    assert receipt.message_id
    return str(receipt.message_id)


def test_an_answer_lost_after_the_store_is_retried_and_stored_once(
    broker: BrokerProcess, proxy: SwallowingProxy
) -> None:
    lose_an_answer(broker, proxy, "dup-lost")
    assert topic_total(broker.endpoint, "dup-lost") == 1


def test_without_dedup_the_same_lost_answer_is_stored_twice(tmp_path: Path) -> None:
    """The test above can fail: the same scenario against a broker with the window off
    stores the retry as a second message (what every client saw before dedup)."""
    proxy = SwallowingProxy()
    proc = proxied(tmp_path, proxy, dedup=False)
    try:
        lose_an_answer(proc, proxy, "dup-lost-off")
        # the retry was answered, so it is stored; its dispatch may trail the answer by a
        # dispatch round when another appender held the dispatch lock
        wait_until(lambda: topic_total(proc.endpoint, "dup-lost-off") >= 2, "the retry visible")
        assert topic_total(proc.endpoint, "dup-lost-off") == 2
    finally:
        assert proc.stop() == 0, "".join(proc.output[-50:])
        proxy.close()


@pytest.mark.parametrize("dedup", [True, False])
def test_a_broker_killed_after_the_write_answers_the_retry_from_its_log(
    tmp_path: Path, dedup: bool
) -> None:
    """On: the retry gets the first answer, one message. Off (the control): two."""
    proc = start(tmp_path, dedup=dedup)
    try:
        first = send_message(proc.endpoint, proto("dup-kill", "KILL-1"))
        proc.kill()  # the answer reached us here; a client whose answer was lost retries
        proc = start(tmp_path, dedup=dedup)  # recovery rebuilds the window from the log
        again = send_message(proc.endpoint, proto("dup-kill", "KILL-1"))
        assert (again == first) is dedup
        want = 1 if dedup else 2
        wait_until(lambda: topic_total(proc.endpoint, "dup-kill") >= want, "the sends visible")
        assert topic_total(proc.endpoint, "dup-kill") == want
    finally:
        proc.stop()


def test_the_window_is_reported_in_metrics(broker: BrokerProcess) -> None:
    before = scrape(metrics_url(broker))
    for _ in range(2):
        send_message(broker.endpoint, proto("dup-metrics", "METRICS-1"))
    after = scrape(metrics_url(broker))
    node = {"cluster": "DefaultCluster", "node_id": "broker-a"}
    grew = value(after, "rocketmq_dedup_ids", **node) - value(before, "rocketmq_dedup_ids", **node)
    assert grew == 1
    assert value(after, "rocketmq_dedup_memory_bytes", **node) > 0
    repeats = "rocketmq_dedup_repeats_total"
    assert value(after, repeats, **node) - value(before, repeats, **node) == 1
    cpu = "rocketmq_dedup_cpu_seconds_total"
    for i in range(CPU_SAMPLE):  # one send in CPU_SAMPLE is timed
        send_message(broker.endpoint, proto("dup-metrics", f"METRICS-CPU-{i}"))
    assert value(scrape(metrics_url(broker)), cpu, **node) > value(after, cpu, **node)
