"""Tiny TCP peers for the harness's own tests: ``python -m tests.netfaults.probe serve
HOST PORT`` echoes every connection (prints ``READY``); ``... connect HOST PORT TIMEOUT_S``
sends one byte and prints the round trip in ms, or exits 1 with the error's name."""

from __future__ import annotations

import socket
import sys
import threading
import time


def serve(host: str, port: int) -> None:
    listener = socket.create_server((host, port))
    print("READY", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)


def connect(host: str, port: int, timeout_s: float) -> int:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            start = time.monotonic()
            sock.sendall(b"x")
            if sock.recv(1) != b"x":
                raise ConnectionError("no echo")
            print(f"{(time.monotonic() - start) * 1000:.1f}")
            return 0
    except OSError as exc:
        print(type(exc).__name__)
        return 1


if __name__ == "__main__":
    verb, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if verb == "serve":
        serve(host, port)
    else:
        sys.exit(connect(host, port, float(sys.argv[4])))
