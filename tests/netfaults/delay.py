"""A transparent TCP relay that delays every chunk: ``python -m tests.netfaults.delay PORT
DELAY_MS JITTER_MS``, run inside a node's namespace by ``net.Network.degrade``.

An iptables REDIRECT sends the node's outbound connections here; the relay reads the
original destination (``SO_ORIGINAL_DST``), connects to it with ``SO_MARK`` = ``RELAY_MARK``
(which the REDIRECT rule skips) and forwards both directions, each chunk held for
``DELAY_MS`` ± ``JITTER_MS`` (uniform) but never overtaking the chunk before it, as TCP
would deliver it. Prints ``READY`` once listening.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import sys
import time

from tests.netfaults.net import RELAY_MARK

SO_ORIGINAL_DST = 80


def original_destination(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


async def pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float, jitter_s: float
) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if not chunk:
                writer.close()
                return
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    last_due = 0.0
    try:
        while True:
            chunk = await reader.read(65536)
            due = time.monotonic() + delay_s + random.uniform(-jitter_s, jitter_s)
            last_due = max(last_due, due)
            queue.put_nowait((last_due, chunk))
            if not chunk:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
        writer.close()


async def serve(port: int, delay_s: float, jitter_s: float) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, dport = original_destination(writer.get_extra_info("socket"))
        out = socket.socket()
        out.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, RELAY_MARK)
        out.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(out, (host, dport))
        except OSError:
            out.close()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(sock=out)
        await asyncio.gather(
            pump(reader, up_writer, delay_s, jitter_s),
            pump(up_reader, writer, delay_s, jitter_s),
            return_exceptions=True,
        )

    server = await asyncio.start_server(relay, "0.0.0.0", port)
    print("READY", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    port, delay_ms, jitter_ms = (int(a) for a in sys.argv[1:4])
    asyncio.run(serve(port, delay_ms / 1000, jitter_ms / 1000))
