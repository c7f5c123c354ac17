"""``python -m bench WORKLOAD [--json] [--size tiny|full]``: run one benchmark workload.

``python -m bench all [--size tiny|full] [--out DIR] [--from-json FILE...]`` runs every
workload and writes ``DIR/BENCHMARKS.md`` and ``DIR/bench/*.png`` (default DIR: docs).

``--peer NAME`` (repeatable) picks the real peers a workload runs beside ours (default: all
it has; see bench/real_peers.py); ``--peer none`` runs without them (``all`` too).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from bench import (
    backlog,
    cluster,
    consume,
    java_load,
    java_peer,
    latency,
    produce,
    python_peer,
    real_peers,
    remoting,
    replication,
    server_mode,
    spark_rw,
    store_append,
    topics,
)
from bench.report import Result, print_result

WORKLOADS: dict[str, Callable[[str], list[Result]]] = {
    "store-append": store_append.run,
    "produce": produce.run,
    "consume": consume.run,
    "latency": latency.run,
    "topics": topics.run,
    "backlog": backlog.run,
    "spark-read": spark_rw.run_read,
    "spark-write": spark_rw.run_write,
    "server-mode": server_mode.run,
    "cluster": cluster.run,
    "replication": replication.run,
    "remoting": remoting.run,
    "java-load": java_load.run,
    "java-batch": java_peer.run_batch,
    "java-latency": java_peer.run_latency,
    "python-load": python_peer.run,
}
# the workloads with real-peer sides (bench/real_peers.py): called with the peers chosen
PEER_WORKLOADS: dict[str, Callable[[str, tuple[str, ...]], list[Result]]] = {
    "spark-read": spark_rw.run_read,
    "spark-write": spark_rw.run_write,
    "java-load": java_load.run,
    "java-batch": java_peer.run_batch,
    "java-latency": java_peer.run_latency,
    "python-load": python_peer.run,
}
ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workload", choices=[*sorted(WORKLOADS), "all"])
    parser.add_argument("--json", action="store_true", help="end with one JSON result line")
    parser.add_argument(
        "--size",
        choices=("tiny", "full"),
        default="full",
        help="tiny: seconds, for the test suite; full: the real measurement",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs",
        help="all: where BENCHMARKS.md and bench/*.png go (default: docs/)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=[],
        metavar="FILE",
        help="all: redraw the docs from saved results instead of running",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="NAME",
        help=f"a real peer to run beside ours: {', '.join(real_peers.NAMES)} or none "
        "(default: every peer the workload has)",
    )
    args = parser.parse_args(argv)
    if args.workload == "all":
        from bench import all as run_all

        if args.peer not in ([], ["none"]):
            parser.error("all takes only --peer none (each workload runs the peers it has)")
        return run_all.main(args.size, args.out, args.from_json, no_peers=bool(args.peer))
    try:
        peers = real_peers.choose(args.workload, args.peer)
    except real_peers.PeerChoiceError as exc:
        parser.error(str(exc))
    run = WORKLOADS[args.workload]
    results = (
        PEER_WORKLOADS[args.workload](args.size, peers)
        if args.workload in PEER_WORKLOADS
        else run(args.size)
    )
    for result in results[:-1]:
        print_result(result, as_json=False)
    print_result(results[-1], as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
