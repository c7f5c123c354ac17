"""Admin verbs on the broker's settings: ``GetBrokerConfig`` and ``UpdateBrokerConfig``.

Request fields and results are listed in ``server/admin.py``; which keys may change while
the broker runs is the broker's rule (``broker/live_config.py``). Both are for super users
only under ACL (``auth/resources.py`` lists neither).
"""

from __future__ import annotations

from typing import Final

from broker_core.broker import live_config
from broker_core.errors import InvalidArgumentError
from broker_core.server.context import ServerContext
from broker_core.server.json_args import Args, Json, Verb


def get_broker_config(ctx: ServerContext, args: Args) -> Json:
    return {"config": live_config.current(ctx.broker), "live_keys": list(live_config.LIVE_KEYS)}


def update_broker_config(ctx: ServerContext, args: Args) -> Json:
    key = args.text("key", required=True)
    if not args.has("value"):
        raise InvalidArgumentError("UpdateBrokerConfig: 'value' is required")
    old, new = live_config.update(ctx.broker, key, args.data["value"])
    return {"key": key, "old": old, "new": new}


VERBS: Final = {
    "GetBrokerConfig": Verb(get_broker_config, frozenset()),
    "UpdateBrokerConfig": Verb(update_broker_config, frozenset({"key", "value"}), change=True),
}
