"""Single sends under load through each front end: sends/s and broker CPU µs per call.

16 client threads send single 128 B messages for ``--seconds`` to a broker process of its
own per front end (``python -m bench.front_load serve ...``), and the broker process's
CPU (user + system, from ``/proc``) is divided by the calls it answered: the figure
issue 27 states per front end (the remoting server's ~173 µs/call). Front ends:

* ``remoting``: the 4.x remoting front end (``RemotingFrontEnd``), SEND_MESSAGE_V2 over one
  connection that all threads share (as the Java 4.x client does); ``remoting-asyncio``
  the same on asyncio's own loop where uvloop is installed;
* ``remoting-echo``: the remoting server alone, every request answered at once (the
  transport's own cost per call);
* ``grpc-sync``: grpcio's thread-pool server (what ``server/app.py`` serves);
* ``grpc-aio-pool``: grpc.aio, handlers run in its migration thread pool;
* ``grpc-aio-inline``: grpc.aio, SendMessage run inline on the event loop (a coroutine
  that calls the synchronous handler: no thread hand-off).

``--against REV`` runs the remoting front end of git revision REV as well (exported as
``broker_core_base``, see ``bench.send_cost``); rounds alternate between the variants so
a load spike on the shared machine hits them alike::

    python -m bench.front_load --modes remoting grpc-sync --rounds 3 --against main
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

BODY = b"x" * 128
THREADS = 16
MODES = (
    "remoting",
    "remoting-asyncio",
    "remoting-echo",
    "grpc-sync",
    "grpc-aio-pool",
    "grpc-aio-inline",
)


def _serve_echo(pkg: str) -> None:
    """The remoting transport alone: every request answered at once, no broker."""
    server_module = importlib.import_module(f"{pkg}.remoting.server")
    handlers = {310: lambda _ch, req: req.response(ext_fields={"msgId": "x"})}
    try:
        server = server_module.RemotingServer("127.0.0.1:0", handlers, inline={310})
    except TypeError:  # a revision before the event loop: no inline codes
        server = server_module.RemotingServer("127.0.0.1:0", handlers)
    print(f"READY {server.start()}", flush=True)
    sys.stdin.read()
    server.stop()


def _serve(mode: str, pkg: str, store_dir: str, flush: str) -> None:
    if mode == "remoting-echo":
        _serve_echo(pkg)
        return
    config = importlib.import_module(f"{pkg}.config")
    store = config.StoreConfig(store_dir=store_dir, flush_mode=flush)
    broker = importlib.import_module(f"{pkg}.broker.broker").Broker(
        config.BrokerConfig(default_queue_nums=8), store
    )
    broker.start()
    try:
        if mode.startswith("remoting"):
            if mode == "remoting-asyncio":  # asyncio's own loop even where uvloop is installed
                server_module = importlib.import_module(f"{pkg}.remoting.server")
                setattr(server_module, "new_event_loop", asyncio.new_event_loop)  # noqa: B010
            front = importlib.import_module(f"{pkg}.remoting_broker.frontend")
            server = front.RemotingFrontEnd(broker, "127.0.0.1:0")
            print(f"READY {server.start()}", flush=True)
            sys.stdin.read()  # the bench closes stdin to stop us
            server.stop()
        else:
            _serve_grpc(mode, pkg, broker)
    finally:
        broker.stop()


def _serve_grpc(mode: str, pkg: str, broker: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from rocketmq.grpc_protocol import service_pb2_grpc

    ctx = importlib.import_module(f"{pkg}.server.context").ServerContext(
        broker, "127.0.0.1:0", broker.config.broker_name
    )
    service = importlib.import_module(f"{pkg}.server.service").MessagingService(ctx)
    pool = ThreadPoolExecutor(max_workers=64)
    if mode == "grpc-sync":
        server = grpc.server(pool)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(f"READY 127.0.0.1:{port}", flush=True)
        sys.stdin.read()
        server.stop(1).wait()
        return

    class Inline(service_pb2_grpc.MessagingServiceServicer):
        async def SendMessage(self, request: Any, context: Any) -> Any:
            return service.SendMessage(request, context)

    async def main() -> None:
        aio = grpc.aio.server(migration_thread_pool=pool)
        servicer = Inline() if mode == "grpc-aio-inline" else service
        service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, aio)
        port = aio.add_insecure_port("127.0.0.1:0")
        await aio.start()
        print(f"READY 127.0.0.1:{port}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await aio.stop(1)

    asyncio.run(main())


def _sender(mode: str, address: str) -> tuple[Any, Any]:
    """(send one message, close) for a client of ``mode``: the same client for every
    variant of a mode (this checkout's)."""
    ids = itertools.count()
    if mode.startswith("remoting"):
        from broker_core.remoting.client import RemotingClient
        from broker_core.remoting.command import RemotingCommand

        client = RemotingClient(address, timeout_s=10)
        fields = {"a": "pg", "b": "load", "c": "TBW102", "d": "8", "e": "-1", "f": "0"}

        def send_remoting() -> None:
            props = f"UNIQ_KEY\x01L{next(ids):015d}\x02"
            req = RemotingCommand.request(310, {**fields, "g": "0", "i": props}, body=BODY)
            answer = client.invoke(req)
            assert answer.code == 0, answer.remark

        return send_remoting, client.close
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

    channel = grpc.insecure_channel(address)
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    checksum = f"{zlib.crc32(BODY):08X}"

    def send_grpc() -> None:
        sp = pb.SystemProperties(
            message_id=f"L{next(ids):015d}", message_type=pb.MessageType.NORMAL
        )
        sp.body_digest.type = pb.DigestType.CRC32
        sp.body_digest.checksum = checksum
        msg = pb.Message(topic=pb.Resource(name="load"), body=BODY, system_properties=sp)
        answer = stub.SendMessage(service_pb2.SendMessageRequest(messages=[msg]), timeout=10)
        assert answer.status.code == pb.Code.OK, answer.status.message

    return send_grpc, channel.close


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _round(
    mode: str, pkg: str, root: Path, seconds: float, env: dict[str, str], flush: str
) -> dict[str, float]:
    store = tempfile.mkdtemp(dir=root)
    args = ["serve", "--mode", mode, "--pkg", pkg, "--store-dir", store, "--flush", flush]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.front_load", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"{mode} broker did not start: {line!r}")
        send, close = _sender(mode, line.split()[1])
        try:
            for _ in range(50):
                send()  # warm up: topic created, connections made
            return _load(send, proc.pid, seconds)
        finally:
            close()
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(60)


def _load(send: Any, pid: int, seconds: float) -> dict[str, float]:
    counts = [0] * THREADS
    stop = threading.Event()

    def worker(i: int) -> None:
        while not stop.is_set():
            send()
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    cpu0, wall0 = _cpu_s(pid), time.perf_counter()
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join()
    cpu, wall, calls = _cpu_s(pid) - cpu0, time.perf_counter() - wall0, sum(counts)
    return {"sends_s": round(calls / wall), "broker_us_per_call": round(cpu / calls * 1e6, 1)}


def measure(
    modes: list[str], rounds: int, seconds: float, against: str | None, flush: str = "async"
) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = dict(os.environ)
        variants = [(mode, "broker_core") for mode in modes]
        if against:
            send_cost = importlib.import_module("bench.send_cost")
            base = send_cost.export_revision(against, root)
            env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
            variants += [(mode, base) for mode in modes if mode in ("remoting", "remoting-echo")]
        samples: dict[str, list[dict[str, float]]] = {f"{m} {p}": [] for m, p in variants}
        for r in range(rounds):
            for mode, pkg in variants[:: 1 if r % 2 == 0 else -1]:
                samples[f"{mode} {pkg}"].append(_round(mode, pkg, root, seconds, env, flush))
        return samples


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.front_load")
    parser.add_argument("command", nargs="?", choices=["serve"])
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--pkg", default="broker_core")
    parser.add_argument("--store-dir")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--against", help="a git revision whose remoting front end runs too")
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    args = parser.parse_args()
    if args.command == "serve":
        _serve(args.mode, args.pkg, args.store_dir, args.flush)
        return
    figures = measure(args.modes, args.rounds, args.seconds, args.against, args.flush)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
