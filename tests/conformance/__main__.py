"""``./dev conformance [--json] [--docs] [--only NAME ...] [--keep]``

Runs every scenario against Apache RocketMQ and ours, prints one line per scenario and
the summary line (with ``--json``, the counts as one JSON object instead); ``--docs``
rewrites docs/COMPATIBILITY.md from the run. Exits 1 when a difference is undocumented.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys

from tests.conformance import report
from tests.conformance.runner import counts, fresh_workdir, run_all, save, summary_line


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="./dev conformance")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    p.add_argument("--docs", action="store_true", help="rewrite docs/COMPATIBILITY.md")
    p.add_argument("--only", nargs="*", help="scenario names to run")
    p.add_argument("--parallel", type=int, default=2, help="scenarios at once per broker")
    p.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    args = p.parse_args(argv)
    # a terminated run still stops both brokers (the finally blocks run)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = fresh_workdir()
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    results = run_all(workdir, args.only, log, args.parallel)
    save(results, workdir / "results.json")
    if args.docs:
        report.write(results, partial=bool(args.only))
    if args.json:
        print(json.dumps(counts(results)))
    else:
        for r in results:
            if r.verdict != "same":
                print(f"{r.verdict}: {r.name}\n  rocketmq: {r.rocketmq}\n  ours:     {r.ours}")
        print(summary_line(results))
    if args.keep:
        print(f"kept {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if counts(results)["undocumented"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
