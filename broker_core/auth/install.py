"""Wire users, ACLs and request signing into one ``BrokerServer``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker_core.auth.authority import Authority
from broker_core.auth.config import AuthConfig
from broker_core.auth.store import AUTH_FILE, AuthStore

if TYPE_CHECKING:
    from broker_core.server.app import BrokerServer

log = logging.getLogger(__name__)


def install_auth(server: BrokerServer, config: AuthConfig) -> AuthStore:
    """Open the user table (config users written in), add the user/ACL admin verbs, and,
    when ``config.enabled``, check every call's signature and rights."""
    from broker_core.server.admin import register_auth_methods
    from broker_core.server.guard import Guard

    store = AuthStore(server.broker.store.config.config_dir / AUTH_FILE)
    if config.users:
        store.bootstrap(config.users)
    server.ctx.auth = store
    server.broker.replication.reloaders[AUTH_FILE] = store.reload  # a slave's copy arrived
    register_auth_methods()
    if config.enabled:
        server.authority = Authority(store, config)  # the remoting port checks with it too
        server.gate.wrappers.append(Guard(server.authority))
        log.info(
            "authentication on: %d user(s), clock skew %d ms, local-time stamps %s",
            len(store.users()),
            config.max_clock_skew_ms,
            "accepted" if config.accept_local_time else "refused",
        )
    return store
