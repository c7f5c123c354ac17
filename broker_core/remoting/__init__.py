"""RocketMQ's TCP remoting protocol: frames, codes, a threaded server, a blocking client.

``frame`` (bytes <-> ``RemotingCommand``), ``headers`` (JSON and ROCKETMQ binary headers),
``codes``, ``channel`` (one connection), ``server`` and ``client``. Used by the NameServer
(``broker_core.namesrv``) and, later, by a broker-side listener for 4.x clients.
"""

from broker_core.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from broker_core.remoting.command import RemotingCommand

__all__ = ["LanguageCode", "RemotingCommand", "RequestCode", "ResponseCode", "SerializeType"]
