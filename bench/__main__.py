"""``python -m bench WORKLOAD [--json] [--size tiny|full]``: run one benchmark workload."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import produce, spark_rw, store_append
from bench.report import Result, print_result

WORKLOADS: dict[str, Callable[[str], list[Result]]] = {
    "store-append": store_append.run,
    "produce": produce.run,
    "spark-read": spark_rw.run_read,
    "spark-write": spark_rw.run_write,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--json", action="store_true", help="end with one JSON result line")
    parser.add_argument("--size", choices=("tiny", "full"), default="full",
                        help="tiny: seconds, for the test suite; full: the real measurement")
    args = parser.parse_args(argv)
    results = WORKLOADS[args.workload](args.size)
    for result in results[:-1]:
        print_result(result, as_json=False)
    print_result(results[-1], as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
