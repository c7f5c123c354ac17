"""Process logging: ``--log-level`` and ``--log-format json|text``.

Text lines are ``time LEVEL logger: message``. JSON lines are one object per line with
``ts`` (ISO-8601 UTC, ms), ``level``, ``logger``, ``message``, ``thread``, the
exception's traceback as ``exc`` when there is one, and any structured fields a caller
passed as ``extra={"fields": {...}}`` (the audit log does) under their own keys.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, Final

LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Route the root logger to stderr at ``level`` in format ``fmt`` (replacing handlers).

    ValueError for an unknown level or format (argparse restricts both before this).
    """
    if level.upper() not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level must be one of {LEVELS}, format one of {FORMATS}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
