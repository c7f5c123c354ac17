"""JSON bodies and header fields of the NameServer requests (RocketMQ's field names).

Registration (REGISTER_BROKER 103) header ``extFields``: ``clusterName``, ``brokerName``,
``brokerId``, ``brokerAddr``, ``haServerAddr``, ``heartbeatTimeoutMillis`` and our
``grpcAddr``. Body, a ``TopicConfigSerializeWrapper`` (Java brokers wrap it as
``{"topicConfigSerializeWrapper": {...}, "filterServerList": []}``; both are accepted)::

    {"topicConfigTable": {"orders": {"topicName": "orders", "readQueueNums": 4,
                                     "writeQueueNums": 4, "perm": 6, "order": false,
                                     "topicSysFlag": 0, "topicFilterType": "SINGLE_TAG"}},
     "dataVersion": {"stateVersion": 0, "timestamp": 1700000000000, "counter": 3}}

Route (GET_ROUTEINFO_BY_TOPIC 105) response body, a ``TopicRouteData``::

    {"queueDatas": [{"brokerName": "a", "readQueueNums": 4, "writeQueueNums": 4,
                     "perm": 6, "topicSysFlag": 0}],
     "brokerDatas": [{"cluster": "c", "brokerName": "a", "brokerAddrs": {"0": "h:p"},
                      "grpcAddrs": {"0": "h:p"}, "enableActingMaster": false}],
     "filterServerTable": {}}

Cluster info (106): ``{"brokerAddrTable": {name: BrokerData}, "clusterAddrTable":
{cluster: [names]}, "brokerLiveTable": [live...]}`` (the last is ours). Topic list (206):
``{"topicList": [...]}``. Output is always standard JSON (numeric map keys quoted); input
may also be fastjson's ``{0:"h:p"}``. Malformed input raises ``InvalidArgumentError``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from broker_core.errors import InvalidArgumentError
from broker_core.namesrv.model import (
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    BrokerData,
    BrokerLive,
    BrokerRegistration,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicQueueConfig,
    TopicRoute,
)

_BARE_NUMERIC_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def loads(body: bytes, what: str) -> Any:
    """Parse a JSON body, tolerating fastjson's unquoted numeric map keys."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{what} body is not UTF-8") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise InvalidArgumentError(f"{what} body is nested too deeply") from None
    try:
        return json.loads(_BARE_NUMERIC_KEY.sub(r'\1"\2"\3', text))
    except ValueError as exc:
        raise InvalidArgumentError(f"{what} body is not JSON: {exc}") from None


def _get(obj: Any, key: str, kind: type, what: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InvalidArgumentError(f"{what}: missing field {key!r}")
    value = obj[key]
    if kind is int and isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidArgumentError(f"{what}: field {key!r} is not {kind.__name__}: {value!r}")
    return value


def field_int(fields: dict[str, str], key: str, default: int | None = None) -> int:
    """An integer header field; raises ``InvalidArgumentError`` naming it if missing/bad."""
    text = fields.get(key)
    if text is None:
        if default is None:
            raise InvalidArgumentError(f"request header is missing {key!r}")
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"request header {key!r} is not an integer: {text!r}") from None


def field_str(fields: dict[str, str], key: str, default: str | None = None) -> str:
    text = fields.get(key, default)
    if text is None:
        raise InvalidArgumentError(f"request header is missing {key!r}")
    return text


# ---- data version and registration ---------------------------------------------------------


def data_version_json(v: DataVersion) -> dict[str, int]:
    return {"stateVersion": v.state_version, "timestamp": v.timestamp_ms, "counter": v.counter}


def data_version_from(obj: Any) -> DataVersion:
    what = "dataVersion"
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{what} is not a JSON object: {obj!r}")
    counter = obj.get("counter", 0)
    if isinstance(counter, dict):  # fastjson may write an AtomicLong as {"value": n}
        counter = counter.get("value", 0)
    fields = {**obj, "stateVersion": obj.get("stateVersion", 0), "counter": counter}
    return DataVersion(
        state_version=_get(fields, "stateVersion", int, what),
        timestamp_ms=_get(fields, "timestamp", int, what),
        counter=_get(fields, "counter", int, what),
    )


def registration_fields(reg: BrokerRegistration) -> dict[str, str]:
    return {
        "clusterName": reg.cluster,
        "brokerName": reg.broker_name,
        "brokerId": str(reg.broker_id),
        "brokerAddr": reg.broker_addr,
        "haServerAddr": reg.ha_addr,
        "grpcAddr": reg.grpc_addr,
        "heartbeatTimeoutMillis": str(reg.heartbeat_timeout_ms),
        "enableActingMaster": "false",
        "compressed": "false",
    }


def registration_body(reg: BrokerRegistration) -> bytes:
    table = {
        name: {
            "topicName": name,
            "readQueueNums": t.read_queue_nums,
            "writeQueueNums": t.write_queue_nums,
            "perm": t.perm,
            "order": t.order,
            "topicSysFlag": 0,
            "topicFilterType": "SINGLE_TAG",
        }
        for name, t in reg.topics.items()
    }
    return dumps({"topicConfigTable": table, "dataVersion": data_version_json(reg.data_version)})


def registration_from(fields: dict[str, str], body: bytes) -> BrokerRegistration:
    """Decode a REGISTER_BROKER request; raises ``InvalidArgumentError`` naming the field."""
    if fields.get("compressed", "false").lower() == "true":
        raise InvalidArgumentError("compressed registration bodies are not supported")
    wrapper = loads(body, "registration") if body else {}
    if isinstance(wrapper, dict) and "topicConfigSerializeWrapper" in wrapper:
        wrapper = wrapper["topicConfigSerializeWrapper"]
    if not isinstance(wrapper, dict):
        raise InvalidArgumentError("registration body is not a JSON object")
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise InvalidArgumentError("registration: topicConfigTable is not an object")
    version = wrapper.get("dataVersion")
    return BrokerRegistration(
        cluster=field_str(fields, "clusterName"),
        broker_name=field_str(fields, "brokerName"),
        broker_id=field_int(fields, "brokerId"),
        broker_addr=field_str(fields, "brokerAddr"),
        grpc_addr=field_str(fields, "grpcAddr", ""),
        ha_addr=field_str(fields, "haServerAddr", ""),
        topics={name: _topic_config_from(name, cfg) for name, cfg in table.items()},
        data_version=data_version_from(version) if version else DataVersion(0, 0, 0),
        heartbeat_timeout_ms=field_int(
            fields, "heartbeatTimeoutMillis", DEFAULT_HEARTBEAT_TIMEOUT_MS
        ),
    )


def _topic_config_from(name: str, cfg: Any) -> TopicQueueConfig:
    what = f"topicConfigTable[{name!r}]"
    return TopicQueueConfig(
        read_queue_nums=_get(cfg, "readQueueNums", int, what),
        write_queue_nums=_get(cfg, "writeQueueNums", int, what),
        perm=_get(cfg, "perm", int, what),
        order=bool(cfg.get("order", False)),
    )


# ---- routes ---------------------------------------------------------------------------------


def queue_data_json(q: QueueData) -> dict[str, Any]:
    return {
        "brokerName": q.broker_name,
        "readQueueNums": q.read_queue_nums,
        "writeQueueNums": q.write_queue_nums,
        "perm": q.perm,
        "topicSysFlag": q.topic_sys_flag,
    }


def broker_data_json(b: BrokerData) -> dict[str, Any]:
    return {
        "cluster": b.cluster,
        "brokerName": b.broker_name,
        "brokerAddrs": {str(k): v for k, v in b.broker_addrs.items()},
        "grpcAddrs": {str(k): v for k, v in b.grpc_addrs.items()},
        "enableActingMaster": False,
    }


def route_body(route: TopicRoute) -> bytes:
    return dumps(
        {
            "queueDatas": [queue_data_json(q) for q in route.queue_datas],
            "brokerDatas": [broker_data_json(b) for b in route.broker_datas],
            "filterServerTable": {},
        }
    )


def route_from(topic: str, body: bytes) -> TopicRoute:
    obj = loads(body, "route")
    what = f"route of {topic!r}"
    return TopicRoute(
        topic=topic,
        queue_datas=[_queue_data_from(q, what) for q in _get(obj, "queueDatas", list, what)],
        broker_datas=[_broker_data_from(b, what) for b in _get(obj, "brokerDatas", list, what)],
    )


def _queue_data_from(obj: Any, what: str) -> QueueData:
    return QueueData(
        broker_name=_get(obj, "brokerName", str, what),
        read_queue_nums=_get(obj, "readQueueNums", int, what),
        write_queue_nums=_get(obj, "writeQueueNums", int, what),
        perm=_get(obj, "perm", int, what),
        topic_sys_flag=int(obj.get("topicSysFlag", 0)),
    )


def _broker_data_from(obj: Any, what: str) -> BrokerData:
    return BrokerData(
        cluster=_get(obj, "cluster", str, what),
        broker_name=_get(obj, "brokerName", str, what),
        broker_addrs=_id_map(_get(obj, "brokerAddrs", dict, what), what),
        grpc_addrs=_id_map(obj.get("grpcAddrs") or {}, what),
    )


def _id_map(raw: dict[str, Any], what: str) -> dict[int, str]:
    try:
        return {int(k): str(v) for k, v in raw.items()}
    except ValueError:
        raise InvalidArgumentError(f"{what}: broker ids must be integers: {raw!r}") from None


# ---- cluster info and topic list -------------------------------------------------------------


def live_json(live: BrokerLive) -> dict[str, Any]:
    return {
        "cluster": live.cluster,
        "brokerName": live.broker_name,
        "brokerId": live.broker_id,
        "brokerAddr": live.broker_addr,
        "grpcAddr": live.grpc_addr,
        "lastUpdateTimestamp": live.last_update_ms,
        "dataVersion": data_version_json(live.data_version),
    }


def cluster_info_body(info: ClusterInfo) -> bytes:
    return dumps(
        {
            "brokerAddrTable": {n: broker_data_json(b) for n, b in info.brokers.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in info.clusters.items()},
            "brokerLiveTable": [live_json(live) for live in info.live],
        }
    )


def cluster_info_from(body: bytes) -> ClusterInfo:
    obj = loads(body, "cluster info")
    what = "cluster info"
    brokers = _get(obj, "brokerAddrTable", dict, what)
    clusters = _get(obj, "clusterAddrTable", dict, what)
    return ClusterInfo(
        brokers={name: _broker_data_from(b, what) for name, b in brokers.items()},
        clusters={c: [str(n) for n in names] for c, names in clusters.items()},
        live=[_live_from(x, what) for x in obj.get("brokerLiveTable") or []],
    )


def _live_from(obj: Any, what: str) -> BrokerLive:
    return BrokerLive(
        cluster=_get(obj, "cluster", str, what),
        broker_name=_get(obj, "brokerName", str, what),
        broker_id=_get(obj, "brokerId", int, what),
        broker_addr=_get(obj, "brokerAddr", str, what),
        grpc_addr=str(obj.get("grpcAddr") or ""),
        last_update_ms=_get(obj, "lastUpdateTimestamp", int, what),
        data_version=data_version_from(_get(obj, "dataVersion", dict, what)),
    )


def topic_list_body(topics: list[str]) -> bytes:
    return dumps({"topicList": sorted(topics)})


def topic_list_from(body: bytes) -> list[str]:
    return [str(t) for t in _get(loads(body, "topic list"), "topicList", list, "topic list")]
