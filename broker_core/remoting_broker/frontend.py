"""The broker's remoting front end: RocketMQ 4.x clients on a TCP port (10911 by default).

One :class:`RemotingFrontEnd` per broker process, beside the gRPC server and over the same
``Broker``: a message sent over one protocol is pulled over the other, and offsets are
shared. It reuses the NameServer's ``RemotingServer`` (an event loop; see
``broker_core/remoting/server.py``): the cheap requests (:func:`inline_codes`: pulls,
heartbeats, offsets, and sends when nothing makes a send wait — async flush, no sync
replication) are handled on the loop thread as they are read; the rest on worker
threads. The handler modules, one per request family:

* :mod:`.send` - SEND_MESSAGE 10, SEND_MESSAGE_V2 310, SEND_BATCH_MESSAGE 320, END_TRANSACTION 37
* :mod:`.pull` - PULL_MESSAGE 11 and LITE_PULL_MESSAGE 361 (long polling without holding the
  connection's thread)
* :mod:`.consumer` - HEART_BEAT 34, UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38,
  QUERY/UPDATE_CONSUMER_OFFSET 14/15, GET_MAX/MIN_OFFSET 30/31, SEARCH_OFFSET_BY_TIMESTAMP 29,
  LOCK/UNLOCK_BATCH_MQ 41/42, CHECK_CLIENT_CONFIG 46
* :mod:`.sendback` - CONSUMER_SEND_MSG_BACK 36 (retry topic, then DLQ)
* :mod:`.transactions` - CHECK_TRANSACTION_STATE 39 pushed to producers
* :mod:`.admin` - UPDATE_AND_CREATE_TOPIC 17, GET_ALL_TOPIC_CONFIG 21,
  GET_BROKER_RUNTIME_INFO 28, VIEW_MESSAGE_BY_ID 33
* :mod:`.admin_stats` - GET_TOPIC_STATS_INFO 202, GET_CONSUME_STATS 208, QUERY_MESSAGE 12,
  GET_CONSUMER_CONNECTION_LIST 203
* :mod:`.admin_config` - GET_TOPIC_CONFIG 351, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200,
  QUERY_TOPIC_CONSUME_BY_WHO 300, INVOKE_BROKER_TO_RESET_OFFSET 222

Broker -> client: NOTIFY_CONSUMER_IDS_CHANGED (40, oneway) to every remoting consumer of a
group whose membership changed (any protocol's join, leave or expiry), so the clients'
own rebalance runs at once. A closed connection unregisters its clients at once (as
RocketMQ's ClientHousekeepingService does). Unknown codes get REQUEST_CODE_NOT_SUPPORTED;
a malformed frame closes that connection only; an unknown topic is TOPIC_NOT_EXIST (17).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from broker_core.auth.authority import Authority
from broker_core.broker.broker import Broker
from broker_core.errors import RemotingError, TopicNotFoundError
from broker_core.remoting.channel import Channel, RequestHandler
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.server import RemotingServer
from broker_core.remoting_broker import (
    admin,
    admin_config,
    admin_stats,
    consumer,
    pull,
    send,
    sendback,
)
from broker_core.remoting_broker.access import RemotingGuard
from broker_core.remoting_broker.context import RemotingContext
from broker_core.remoting_broker.transactions import chained_checker

log = logging.getLogger(__name__)

DEFAULT_REMOTING_PORT = 10911

Handler = Callable[[RemotingContext, Channel, RemotingCommand], "RemotingCommand | None"]

HANDLERS: dict[int, Handler] = {
    RequestCode.SEND_MESSAGE: send.handle_send,
    RequestCode.SEND_MESSAGE_V2: send.handle_send,
    RequestCode.SEND_BATCH_MESSAGE: send.handle_send,
    RequestCode.END_TRANSACTION: send.handle_end_transaction,
    RequestCode.PULL_MESSAGE: pull.handle_pull,
    RequestCode.LITE_PULL_MESSAGE: pull.handle_pull,  # DefaultLitePullConsumer's pulls
    RequestCode.HEART_BEAT: consumer.handle_heartbeat,
    RequestCode.UNREGISTER_CLIENT: consumer.handle_unregister,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer.handle_consumer_list,
    RequestCode.QUERY_CONSUMER_OFFSET: consumer.handle_query_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: consumer.handle_update_offset,
    RequestCode.GET_MAX_OFFSET: consumer.handle_max_offset,
    RequestCode.GET_MIN_OFFSET: consumer.handle_min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: consumer.handle_search_offset,
    RequestCode.LOCK_BATCH_MQ: consumer.handle_lock,
    RequestCode.UNLOCK_BATCH_MQ: consumer.handle_unlock,
    RequestCode.CHECK_CLIENT_CONFIG: consumer.handle_check_client,
    RequestCode.CONSUMER_SEND_MSG_BACK: sendback.handle_send_back,
    RequestCode.UPDATE_AND_CREATE_TOPIC: admin.handle_create_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: admin.handle_all_topics,
    RequestCode.GET_TOPIC_CONFIG: admin_config.handle_topic_config,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin_config.handle_create_group,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: admin_config.handle_consumed_by,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: admin_config.handle_reset_offset,
    RequestCode.GET_BROKER_RUNTIME_INFO: admin.handle_runtime_info,
    RequestCode.VIEW_MESSAGE_BY_ID: admin.handle_view_message,
    RequestCode.GET_TOPIC_STATS_INFO: admin_stats.handle_topic_stats,
    RequestCode.GET_CONSUME_STATS: admin_stats.handle_consume_stats,
    RequestCode.QUERY_MESSAGE: admin_stats.handle_query_message,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: admin_stats.handle_consumer_connections,
}


# Handlers that never block: run on the server's loop thread, with no hand-off per call.
CHEAP = (
    RequestCode.PULL_MESSAGE,
    RequestCode.LITE_PULL_MESSAGE,  # long polling parks the request, it does not wait
    RequestCode.HEART_BEAT,
    RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP,
)
SENDS = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


def inline_codes(broker: Broker) -> frozenset[int]:
    """The codes handled on the loop thread: :data:`CHEAP`, and the sends unless a send
    waits (sync flush waits for an fdatasync, sync replication for the slaves): a waiting
    send on the loop would stall every connection, and on workers concurrent sends share
    one fdatasync (``store/put_combiner.py``)."""
    return frozenset(CHEAP if _sends_wait(broker) else (*CHEAP, *SENDS))


def concurrent_codes(broker: Broker) -> frozenset[int]:
    """The sends, when they wait: on workers side by side, not one after the other per
    connection, so that a client's sends in flight share one store put and fdatasync."""
    return frozenset(SENDS if _sends_wait(broker) else ())


def _sends_wait(broker: Broker) -> bool:
    return broker.store.flusher.sync or broker.config.replication == "sync"


def _bound(ctx: RemotingContext, handler: Handler) -> RequestHandler:
    def run(channel: Channel, req: RemotingCommand) -> RemotingCommand | None:
        try:
            return handler(ctx, channel, req)
        except TopicNotFoundError as exc:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, remark=str(exc))

    return run


class RemotingFrontEnd:
    """A remoting listener over ``broker``; ``start()`` binds, ``stop()`` closes."""

    def __init__(
        self,
        broker: Broker,
        listen: str,
        *,
        broker_name: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        authority: Authority | None = None,
    ) -> None:
        """``ssl_context`` (``remoting/tls.py``'s ``server_context``): serve TLS only.
        ``authority`` (auth on): every request is signed and allowed or answered
        NO_PERMISSION (``access.py``); an unknown code is still REQUEST_CODE_NOT_SUPPORTED."""
        self.ctx = RemotingContext(broker, broker_name or broker.config.broker_name)
        handlers = {code: _bound(self.ctx, h) for code, h in HANDLERS.items()}
        if authority is not None:
            guard = RemotingGuard(authority, broker)
            handlers = {code: guard.wrap(h) for code, h in handlers.items()}
        self._server = RemotingServer(
            listen,
            handlers,
            on_close=self._on_close,
            ssl_context=ssl_context,
            inline=inline_codes(broker),
            concurrent=concurrent_codes(broker),
        )
        broker.add_rebalance_listener(self._notify_group)
        broker.set_transaction_checker(chained_checker(self.ctx, broker.transaction_checker))

    @property
    def address(self) -> str:
        return self.ctx.address

    def start(self) -> str:
        """Bind and serve; returns ``host:port``."""
        self.ctx.address = self._server.start()
        return self.ctx.address

    def stop(self) -> None:
        self._server.stop()

    def _on_close(self, channel: Channel) -> None:
        for session in self.ctx.sessions.closed(channel):
            for group in session.producer_groups | session.consumer_groups:
                self.ctx.broker.clients.unregister(group, session.client_id)

    def _notify_group(self, group: str) -> None:
        """Push NOTIFY_CONSUMER_IDS_CHANGED to the group's remoting consumers (oneway)."""
        for session in self.ctx.sessions.consumers_of(group):
            notice = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
            )
            try:
                session.channel.send(notice)
            except RemotingError as exc:
                log.info("notify %s of group %s failed: %s", session.client_id, group, exc)
