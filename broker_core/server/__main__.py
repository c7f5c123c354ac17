"""``python -m broker_core.server --listen HOST:PORT --store-dir DIR``: run a broker."""

import sys

from broker_core.server.app import run

sys.exit(run())
