"""CPU cost per message of the send path, in process (no gRPC): an A/B tool.

Times, on a real broker over a temporary store (async flush), the handler of the
official ``SendMessage`` for a one-message request, the same with 256 messages, the
remoting ``SEND_MESSAGE_V2`` of one message (frame decode, handler, answer encode: the
Python a 4.x client's single send costs above the socket) and SEND_BATCH_MESSAGE of 256
(handler only), the store API (``MessageStore.put_message`` / ``put_messages`` of 64) and
``SendBulk`` of 256; and the one-message consume of each front end: the official
client's ``ReceiveMessage`` of one message and ``AckMessage`` of it, and a 4.x
``PULL_MESSAGE`` of one.
Each workload runs ``--rounds`` times; the best (least) CPU µs per message of this thread
is printed as JSON: on a shared machine the least time is the one other work disturbed least.

``--against REV`` measures the same workloads on the ``broker_core`` of git revision REV
too, in the same process, the two interleaved round by round (a load spike on the shared
machine hits both alike): the revision's package is exported into a temporary directory
as ``broker_core_base`` (imports rewritten). Only entry points that exist on both sides
of a change to the send path are used::

    python -m bench.send_cost --rounds 5 --against HEAD~3
"""

from __future__ import annotations

import argparse
import gc
import importlib
import itertools
import json
import re
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

BODY = b"x" * 128


class _Channel:
    """The little of a remoting ``Channel`` the send handler reads."""

    peer = "127.0.0.1:40000"


def _remoting_send(pkg: str, broker: Any) -> Callable[[], None]:
    """One SEND_MESSAGE_V2 of one 128 B message, from its frame to its answer's frame."""
    frame_mod = importlib.import_module(f"{pkg}.remoting.frame")
    command = importlib.import_module(f"{pkg}.remoting.command")
    handle = importlib.import_module(f"{pkg}.remoting_broker.send").handle_send
    ctx = importlib.import_module(f"{pkg}.remoting_broker.context").RemotingContext(
        broker, "cost", "127.0.0.1:10911"
    )
    fields = {"a": "pg", "b": "cost", "c": "TBW102", "d": "4", "e": "-1", "f": "0"}
    fields |= {"g": "0", "h": "0", "i": "UNIQ_KEY\x01ID000000000001\x02", "j": "0", "k": "false"}
    request = command.RemotingCommand.request(310, fields, body=BODY)
    data = frame_mod.encode_frame(request)[4:]  # without total_len, as the reader has it
    channel = _Channel()

    ids = itertools.count(1)

    def run() -> None:
        req = frame_mod.decode_payload(data)
        req.ext_fields["i"] = f"UNIQ_KEY\x01R{next(ids):015d}\x02"  # a new id: stored
        frame_mod.encode_frame(handle(ctx, channel, req))

    return run


class _Peer:
    """The little of ``grpc.ServicerContext`` the send, receive and ack handlers read."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"

    def invocation_metadata(self) -> list[Any]:
        return [("x-mq-client-id", "cost-client")]

    def time_remaining(self) -> float:
        return 30.0

    def is_active(self) -> bool:
        return True


def _batch_body(count: int) -> bytes:
    """A 4.x SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``) of ``count``
    plain messages, written here so both sides of an A/B send the same bytes."""
    records = []
    for i in range(count):
        props = f"UNIQ_KEY\x01ID{i:012d}\x02".encode()
        total = 20 + len(BODY) + 2 + len(props)
        head = struct.pack(">iIIii", total, 0, 0, 0, len(BODY))
        records.append(head + BODY + struct.pack(">H", len(props)) + props)
    return b"".join(records)


def _remoting(pkg: str, broker: Any) -> dict[str, tuple[Callable[[], None], int, int]]:
    """The 4.x front end's batch send (SEND_BATCH_MESSAGE of 256; the single send is
    :func:`_remoting_send`)."""
    handle_send = importlib.import_module(f"{pkg}.remoting_broker.send").handle_send
    command = importlib.import_module(f"{pkg}.remoting.command").RemotingCommand
    ctx = importlib.import_module(f"{pkg}.remoting_broker.context").RemotingContext(
        broker, "cost", "127.0.0.1:1"
    )
    fields = {"a": "pg", "b": "cost", "e": "0", "f": "0", "g": "0", "h": "0", "j": "0"}
    many = command(320, ext_fields={**fields, "m": "true"}, body=_batch_body(256))
    channel = _Channel()
    return {
        "remoting_batch_256": (lambda: handle_send(ctx, channel, many), 10, 256),
    }


def _proto(i: int) -> Any:
    sp = pb.SystemProperties(
        message_id=f"ID{i:012d}", message_type=pb.MessageType.NORMAL, born_host="10.0.0.7"
    )
    sp.body_digest.type = pb.DigestType.CRC32
    sp.body_digest.checksum = f"{zlib.crc32(BODY):08X}"
    return pb.Message(topic=pb.Resource(name="cost"), body=BODY, system_properties=sp)


def _cpu_us_per_message(run: Callable[[], None], count: int, messages_per_call: int) -> float:
    run()  # warm up caches (topic lookups, segment creation)
    gc.collect()
    started = time.thread_time_ns()  # this thread's CPU only: not the brokers' threads
    for _ in range(count):
        run()
    return (time.thread_time_ns() - started) / 1000 / (count * messages_per_call)


def workloads(pkg: str, broker: Any) -> dict[str, tuple[Callable[[], None], int, int]]:
    """name → (one call, calls per round, messages per call), of package ``pkg``."""
    try:  # the send handlers' module since the server package was regrouped by RPC family
        send = importlib.import_module(f"{pkg}.server.handlers.send")
        send_one, send_bulk = send.send_message, send.send_bulk
    except ModuleNotFoundError:  # an older checkout (``--against``)
        send_one = importlib.import_module(f"{pkg}.server.handlers.send_message").handle
        send_bulk = importlib.import_module(f"{pkg}.server.bulk_send").send_bulk
    encode_request = importlib.import_module(f"{pkg}.protocol.bulk_send").encode_request
    Message = importlib.import_module(f"{pkg}.message").Message
    ctx = importlib.import_module(f"{pkg}.server.context").ServerContext(
        broker, "127.0.0.1:1", "cost"
    )
    peer = _Peer()
    one = service_pb2.SendMessageRequest(messages=[_proto(0)])
    many = service_pb2.SendMessageRequest(messages=[_proto(i) for i in range(256)])
    frame = encode_request(
        "cost",
        [BODY] * 256,
        [b"UNIQ_KEY\x01ID%012d\x02" % i for i in range(256)],
        born_timestamp_ms=0,
        born_host="10.0.0.7",
    )
    store = broker.store

    def put_one() -> None:
        store.put_message(Message("cost", BODY, queue_id=0, properties={"UNIQ_KEY": "ID1"}))

    def put_64() -> None:
        store.put_messages(
            [
                Message("cost", BODY, queue_id=i % 4, properties={"UNIQ_KEY": "ID1"})
                for i in range(64)
            ]
        )

    ids = itertools.count(1)
    one_props = one.messages[0].system_properties

    def official_one() -> None:  # a new message id each call: the broker's dedup stores it
        one_props.message_id = f"S{next(ids):015d}"
        send_one(ctx, one, peer)

    many_props = [m.system_properties for m in many.messages]

    def official_many() -> None:
        first = next(ids) * 256
        for i, props in enumerate(many_props):
            props.message_id = f"S{first + i:015d}"
        send_one(ctx, many, peer)

    return {
        **_receive_ack(pkg, ctx, peer),
        "official_send_1": (official_one, 1000, 1),
        "official_send_256": (official_many, 10, 256),
        "remoting_send_1": (_remoting_send(pkg, broker), 1000, 1),
        "bulk_send_256": (lambda: send_bulk(ctx, frame, peer), 10, 256),
        "store_put_1": (put_one, 1000, 1),
        "store_put_64": (put_64, 40, 64),
        **_remoting(pkg, broker),
    }


RECEIVE_BACKLOG = 20_000  # messages each side's receive+ack rounds take one by one


def _receive_ack(pkg: str, ctx: Any, peer: _Peer) -> dict[str, tuple[Callable[[], None], int, int]]:
    """The official client's one-message consume: ReceiveMessage of one (its whole
    answer stream) and AckMessage of that message, from a backlog filled here."""
    try:
        receive = importlib.import_module(f"{pkg}.server.handlers.receive").receive_message
        ack = importlib.import_module(f"{pkg}.server.handlers.delivery").ack_message
    except ModuleNotFoundError:  # an older checkout (``--against``)
        return {}
    Message = importlib.import_module(f"{pkg}.message").Message
    topics = importlib.import_module(f"{pkg}.broker.topics")
    ctx.broker.topics.create_or_update(topics.TopicConfig("cost-r", 4, 4))
    store = ctx.broker.store
    for start in range(0, RECEIVE_BACKLOG, 256):
        store.put_messages(
            [Message("cost-r", BODY, queue_id=i % 4, properties={"UNIQ_KEY": f"R{i}"})
             for i in range(start, start + 256)]
        )  # fmt: skip
    store.wait_dispatched()
    request = service_pb2.ReceiveMessageRequest(
        group=pb.Resource(name="cost-g"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="cost-r")),
        batch_size=1,
    )
    request.invisible_duration.seconds = 60
    request.long_polling_timeout.seconds = 0
    acked = service_pb2.AckMessageRequest(
        group=request.group,
        topic=request.message_queue.topic,
        entries=[service_pb2.AckMessageEntry()],
    )

    def receive_ack() -> None:
        for answer in receive(ctx, request, peer):
            if answer.HasField("message"):
                entry = acked.entries[0]
                entry.message_id = answer.message.system_properties.message_id
                entry.receipt_handle = answer.message.system_properties.receipt_handle
        if ack(ctx, acked, peer).status.code != pb.Code.OK:
            raise RuntimeError("the ack failed")

    return {
        "official_receive_ack_1": (receive_ack, 1000, 1),
        "remoting_pull_1": (_remoting_pull(pkg, ctx.broker), 1000, 1),
    }


def _remoting_pull(pkg: str, broker: Any) -> Callable[[], None]:
    """One PULL_MESSAGE of one message (the 4.x consumer's call: handler and answer frame)
    from the backlog :func:`_receive_ack` filled, queue 1, offsets in turn."""
    frame_mod = importlib.import_module(f"{pkg}.remoting.frame")
    command = importlib.import_module(f"{pkg}.remoting.command")
    handle = importlib.import_module(f"{pkg}.remoting_broker.pull").handle_pull
    ctx = importlib.import_module(f"{pkg}.remoting_broker.context").RemotingContext(
        broker, "cost", "127.0.0.1:10911"
    )
    fields = {"consumerGroup": "cost-pull", "topic": "cost-r", "queueId": "1"}
    fields |= {"queueOffset": "0", "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "-1"}
    channel = _Channel()
    held = RECEIVE_BACKLOG // 4  # the messages of queue 1
    offsets = itertools.cycle(range(held))

    def run() -> None:
        fields["queueOffset"] = str(next(offsets))
        answer = handle(ctx, channel, command.RemotingCommand.request(11, dict(fields)))
        if answer is None or answer.code != 0:
            raise RuntimeError(f"the pull found nothing: {answer}")
        frame_mod.encode_frame(answer)

    return run


def _start_broker(pkg: str, store_dir: Path) -> Any:
    config = importlib.import_module(f"{pkg}.config")
    store_config = config.StoreConfig(
        store_dir=str(store_dir),
        segment_size_bytes=256 << 20,
        max_dispatch_lag_bytes=1 << 40,
        max_flush_lag_bytes=1 << 40,
    )
    broker_module = importlib.import_module(f"{pkg}.broker.broker")
    broker = broker_module.Broker(config.BrokerConfig(default_queue_nums=4), store_config)
    broker.start()
    return broker


def export_revision(rev: str, into: Path) -> str:
    """Put ``broker_core`` of git revision ``rev`` under ``into`` as ``broker_core_base``."""
    archive = subprocess.run(
        ["git", "archive", rev, "broker_core"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "broker_core").rename(into / "broker_core_base")
    for path in (into / "broker_core_base").rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\bbroker_core\b", "broker_core_base", text))
    sys.path.insert(0, str(into))
    return "broker_core_base"


def measure(rounds: int, against: str | None = None) -> dict[str, dict[str, float]]:
    """Least CPU µs per message of each workload over ``rounds`` rounds, per package."""
    with tempfile.TemporaryDirectory() as tmp:
        packages = ["broker_core"]
        if against:
            packages.append(export_revision(against, Path(tmp)))
        brokers = {pkg: _start_broker(pkg, Path(tmp) / pkg / "store") for pkg in packages}
        try:
            runs = {pkg: workloads(pkg, broker) for pkg, broker in brokers.items()}
            samples: dict[str, dict[str, list[float]]] = {
                pkg: {name: [] for name in runs[pkg]} for pkg in packages
            }
            for round_ in range(rounds):  # interleaved: a load spike hits every one alike
                for name in runs["broker_core"]:
                    for pkg in packages[:: 1 if round_ % 2 else -1]:
                        run, count, per_call = runs[pkg][name]
                        samples[pkg][name].append(_cpu_us_per_message(run, count, per_call))
        finally:
            for broker in brokers.values():
                broker.stop()
    return {
        pkg: {name: round(min(values), 2) for name, values in by_name.items()}
        for pkg, by_name in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", help="a git revision to measure alongside")
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds, args.against), indent=1))


if __name__ == "__main__":
    main()
