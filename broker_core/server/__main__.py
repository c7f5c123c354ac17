"""``python -m broker_core.server --listen HOST:PORT --store-dir DIR``: run a broker.

Expected failures (bad address or config, the store cannot be opened, the port is
taken, stopping failed) print one line ``error: ...`` and exit with status 1.
"""

import sys

from broker_core.errors import RocketMQError
from broker_core.server.main import run

try:
    sys.exit(run())
except RocketMQError as exc:
    print(f"error: {exc}", file=sys.stderr, flush=True)
    sys.exit(1)
