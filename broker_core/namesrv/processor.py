"""One handler per NameServer request code, over a :class:`RouteTable`.

=====================================  ============================================
request (code)                         answer
=====================================  ============================================
REGISTER_BROKER (103)                  SUCCESS, ``masterAddr``/``haServerAddr`` for a
                                       slave; SYSTEM_ERROR if malformed or stale
UNREGISTER_BROKER (104)                SUCCESS (also when it was not registered)
GET_ROUTEINFO_BY_TOPIC (105)           SUCCESS + TopicRouteData, or TOPIC_NOT_EXIST
GET_BROKER_CLUSTER_INFO (106)          SUCCESS + ClusterInfo
GET_ALL_TOPIC_LIST_FROM_NAMESERVER     SUCCESS + TopicList
(206)
BROKER_HEARTBEAT (904)                 SUCCESS; refreshes the replica's last update
=====================================  ============================================

Bodies and header fields are described in :mod:`broker_core.namesrv.wire`. A malformed
request raises from ``wire`` and the server answers SYSTEM_ERROR with the reason.
"""

from __future__ import annotations

import logging

from broker_core.errors import TopicNotFoundError
from broker_core.namesrv import wire
from broker_core.namesrv.route_table import RouteTable
from broker_core.remoting.channel import Channel, RequestHandler
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand

log = logging.getLogger(__name__)


class NameServerProcessor:
    """The NameServer's request handlers; ``handlers()`` maps codes to them."""

    def __init__(self, table: RouteTable) -> None:
        self._table = table

    def handlers(self) -> dict[int, RequestHandler]:
        return {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
        }

    def register_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        reg = wire.registration_from(req.ext_fields, req.body)
        result = self._table.register(reg, channel.id)
        log.info(
            "registered %s/%s id %d at %s (grpc %s, %d topics, version %s) from %s",
            reg.cluster,
            reg.broker_name,
            reg.broker_id,
            reg.broker_addr,
            reg.grpc_addr,
            len(reg.topics),
            reg.data_version,
            channel.peer,
        )
        fields = {"masterAddr": result.master_addr, "haServerAddr": result.ha_server_addr}
        return req.response(ext_fields={k: v for k, v in fields.items() if v})

    def unregister_broker(self, _channel: Channel, req: RemotingCommand) -> RemotingCommand:
        f = req.ext_fields
        cluster, name = wire.field_str(f, "clusterName"), wire.field_str(f, "brokerName")
        broker_id, addr = wire.field_int(f, "brokerId"), wire.field_str(f, "brokerAddr")
        removed = self._table.unregister(cluster, name, broker_id, addr)
        log.info(
            "unregister %s/%s id %d at %s: %s",
            cluster,
            name,
            broker_id,
            addr,
            "removed" if removed else "was not registered",
        )
        return req.response()

    def get_route(self, _channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = wire.field_str(req.ext_fields, "topic")
        try:
            route = self._table.route(topic)
        except TopicNotFoundError as exc:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, remark=str(exc))
        return req.response(body=wire.route_body(route))

    def get_cluster_info(self, _channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(body=wire.cluster_info_body(self._table.cluster_info()))

    def get_all_topics(self, _channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(body=wire.topic_list_body(self._table.topics()))

    def broker_heartbeat(self, _channel: Channel, req: RemotingCommand) -> RemotingCommand:
        f = req.ext_fields
        known = self._table.heartbeat(
            wire.field_str(f, "clusterName"), wire.field_str(f, "brokerAddr")
        )
        return req.response(remark="" if known else "broker is not registered; register first")
