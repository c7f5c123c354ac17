"""The jobs' command lines: one parser shape and the options the streaming jobs share.

Every job's ``parser()`` starts from :func:`job_parser` (its name, its docstring's first
line as the description, ``--endpoints`` and ``--master``); the streaming jobs (``archive``,
``order_events``) add :func:`add_streaming`'s ``--checkpoint``, ``--starting-offsets``,
``--trigger-seconds`` and ``--max-messages-per-trigger``. Bad values are argparse errors
naming the option (exit status 2).
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def job_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A job's parser: ``prog``, the first line of ``doc`` (the job module's docstring) as
    its description, ``--endpoints`` (required) and ``--master``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(doc or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--endpoints", required=True, help="broker host:port[,host:port]")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[2])"
    )
    return parser


def add_streaming(parser: argparse.ArgumentParser, *, max_messages_help: str) -> None:
    """The options of a streaming job: where its checkpoint is, where its first run starts,
    its trigger (availableNow unless ``--trigger-seconds``) and its rate limit."""
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory of the query")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="earliest, latest or JSON offsets (first run only; default earliest)",
    )
    parser.add_argument(
        "--trigger-seconds",
        type=positive_int,
        default=None,
        help="run continuously with a micro-batch every N s (default: availableNow)",
    )
    parser.add_argument(
        "--max-messages-per-trigger",
        type=positive_int,
        default=None,
        help=max_messages_help,
    )
