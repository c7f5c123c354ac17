"""``python -m broker_core.namesrv --listen HOST:PORT``: run a NameServer."""

import sys

from broker_core.namesrv.server import run

sys.exit(run())
