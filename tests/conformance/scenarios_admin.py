"""mqadmin (rocketmq-tools MQAdminStartup) scenarios against each broker's NameServer.

What is compared is what an operator reads: whether the command succeeded, the header
columns, and the facts in the rows (queue counts, offsets, bodies), with addresses,
broker and cluster names, ids and times normalised away.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

from tests.conformance.registry import Observation, scenario
from tests.conformance.targets import Target

_ADDR = re.compile(r"\d+\.\d+\.\d+\.\d+:\d+")


def _ok(out: str) -> bool:
    return "success" in out.lower() and "exception" not in out.lower()


def _header(out: str) -> list[str]:
    for line in out.splitlines():
        if line.startswith("#"):
            return re.split(r"\s{2,}", line.strip())
    return []


def _rows(out: str) -> list[list[str]]:
    return [
        re.split(r"\s{2,}", ln.strip())
        for ln in out.splitlines()
        if ln.strip() and not ln.startswith("#") and not ln.startswith("RocketMQLog")
    ]


def _failed(out: str) -> str | None:
    match = re.search(r"(\w+Exception)", out)
    return match.group(1) if match else None


@scenario("mqadmin", "clusterList: header and one broker row")
def adm_cluster_list(t: Target) -> Observation:
    out = t.admin("clusterList")
    return {"header": _header(out), "rows": len(_rows(out)), "failed": _failed(out)}


@scenario("mqadmin", "updateTopic then topicList lists it")
def adm_update_topic_list(t: Target) -> Observation:
    out = t.admin("updateTopic", "-c", t.cluster, "-t", "AdmList", "-r", "3", "-w", "3")
    listed = t.admin("topicList").split()
    return {"created": _ok(out), "listed": "AdmList" in listed}


@scenario("mqadmin", "topicRoute: queue counts and permission")
def adm_topic_route(t: Target) -> Observation:
    t.topic("AdmRoute", 3)
    out = t.admin("topicRoute", "-t", "AdmRoute")
    start = out.find("{")
    # fastjson prints the brokerAddrs map with bare integer keys ({0:"addr"})
    text = re.sub(r"([{,\s])(\d+):", r'\1"\2":', out[start:]) if start >= 0 else "{}"
    route = json.loads(text)
    queues = [
        (q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route.get("queueDatas", [])
    ]
    return {"queue_datas": queues, "brokers": len(route.get("brokerDatas", []))}


@scenario("mqadmin", "topicStatus after 3 sends: queue rows and total max offset")
def adm_topic_status(t: Target) -> Observation:
    t.topic("AdmStatus", 2)
    t.c4("send", "AdmStatus", "3", "sync")
    out = t.admin("topicStatus", "-t", "AdmStatus")
    rows = [r for r in _rows(out) if len(r) >= 4 and r[1].isdigit()]
    return {"header": _header(out), "queues": len(rows), "total": sum(int(r[3]) for r in rows)}


@scenario("mqadmin", "updateSubGroup prints success")
def adm_update_sub_group(t: Target) -> Observation:
    out = t.admin("updateSubGroup", "-c", t.cluster, "-g", "GAdmSub")
    return {"created": _ok(out), "failed": _failed(out)}


@scenario("mqadmin", "consumerProgress after a group consumed everything: diff 0")
def adm_consumer_progress(t: Target) -> Observation:
    t.topic("AdmProgress", 2)
    t.c4("send", "AdmProgress", "2", "sync")
    t.c4("push", "AdmProgress", "GAdmProgress", "2", "30", "first")
    out = t.admin("consumerProgress", "-g", "GAdmProgress")
    diff = re.search(r"Diff Total:\s*(-?\d+)", out)
    rows = [r for r in _rows(out) if r and r[0] == "AdmProgress"]
    return {
        "rows": len(rows),
        "diff_total": int(diff.group(1)) if diff else None,
        "failed": _failed(out),
    }


@scenario("mqadmin", "queryMsgByKey finds a sent message by its key")
def adm_query_by_key(t: Target) -> Observation:
    t.topic("AdmKey", 2)
    t.c4("send", "AdmKey", "1", "sync")
    out = t.admin("queryMsgByKey", "-t", "AdmKey", "-k", "k-m-0")
    rows = [r for r in _rows(out) if r and len(r[0]) == 32]
    return {"header": _header(out), "found": len(rows), "failed": _failed(out)}


@scenario("mqadmin", "queryMsgById (offset message id) prints the message")
def adm_query_by_id(t: Target) -> Observation:
    t.topic("AdmId", 2)
    sent = t.c4("send", "AdmId", "1", "sync")
    msg_id = str(sent.of("sent")[0]["offset_msg_id"]) if sent.of("sent") else "none"
    out = t.admin("queryMsgById", "-t", "AdmId", "-i", msg_id)
    return {"topic": _field(out, "Topic"), "keys": _field(out, "Keys"), "failed": _failed(out)}


@scenario("mqadmin", "queryMsgByOffset prints the message at queue 0 offset 0")
def adm_query_by_offset(t: Target) -> Observation:
    t.topic("AdmOff", 1)
    t.c4("send", "AdmOff", "1", "sync")
    broker = _broker_name(t)
    out = t.admin("queryMsgByOffset", "-t", "AdmOff", "-b", broker, "-i", "0", "-o", "0")
    return {"topic": _field(out, "Topic"), "keys": _field(out, "Keys"), "failed": _failed(out)}


@scenario("mqadmin", "resetOffsetByTime to the start lets the group read again")
def adm_reset_offset(t: Target) -> Observation:
    t.topic("AdmReset", 1)
    t.c4("send", "AdmReset", "2", "sync")
    t.c4("push", "AdmReset", "GAdmReset", "2", "30", "first")
    out = t.admin("resetOffsetByTime", "-g", "GAdmReset", "-t", "AdmReset", "-s", "0")
    again = t.c4("push", "AdmReset", "GAdmReset", "2", "30", "first")
    return {
        "failed": _failed(out),
        "read_again": sorted(str(e["body"]) for e in again.of("received")),
    }


@scenario("mqadmin", "deleteTopic removes it from topicList")
def adm_delete_topic(t: Target) -> Observation:
    t.topic("AdmDel", 1)
    out = t.admin("deleteTopic", "-c", t.cluster, "-t", "AdmDel")
    listed = t.admin("topicList").split()
    return {"deleted": _ok(out), "still_listed": "AdmDel" in listed}


@scenario("mqadmin", "brokerStatus prints key/value statistics")
def adm_broker_status(t: Target) -> Observation:
    out = t.admin("brokerStatus", "-b", _broker_addr(t))
    keys = {ln.split(":", 1)[0].strip() for ln in out.splitlines() if ":" in ln}
    common = ["brokerVersionDesc", "msgPutTotalTodayNow", "msgGetTotalTodayNow", "runtime"]
    return {"has": {k: k in keys for k in common}, "failed": _failed(out)}


def _field(out: str, name: str) -> str | None:
    match = re.search(rf"^{name}:\s*(.*)$", out, re.MULTILINE)
    return match.group(1).strip() if match else None


def _broker_rows(t: Target) -> list[list[str]]:
    return [r for r in _rows(t.admin("clusterList")) if len(r) >= 4]


def _broker_name(t: Target) -> str:
    return _broker_rows(t)[0][1]


def _broker_addr(t: Target) -> str:
    row = _broker_rows(t)[0]
    return next(cell for cell in row if _ADDR.fullmatch(cell))


@scenario("mqadmin", "consumerConnection lists a running 4.x push consumer")
def adm_consumer_connection(t: Target) -> Observation:
    t.topic("AdmConn", 1)
    with ThreadPoolExecutor(1) as pool:
        consumer = pool.submit(t.c4, "push", "AdmConn", "GAdmConn", "1", "60", "first")
        out = ""
        for _ in range(8):  # until the consumer's heartbeat is in (each try is one JVM)
            out = t.admin("consumerConnection", "-g", "GAdmConn")
            if "ConsumeType" in out or consumer.done():
                break
        t.c4("send", "AdmConn", "1", "sync")  # lets the consumer finish
        consumer.result()
    model = re.search(r"MessageModel:\s*(\w+)", out)
    rows = [r for r in _rows(out) if r and r[0].isdigit()]
    return {"rows": len(rows), "model": model.group(1) if model else None, "failed": _failed(out)}


@scenario("mqadmin", "topicRoute of a topic nobody created fails")
def adm_topic_route_missing(t: Target) -> Observation:
    out = t.admin("topicRoute", "-t", "AdmNoSuchTopic")
    return {"failed": _failed(out), "has_route": '"queueDatas"' in out}


@scenario("mqadmin", "queryMsgByKey of a key no message has finds nothing")
def adm_query_key_missing(t: Target) -> Observation:
    t.topic("AdmKeyNone", 2)
    t.c4("send", "AdmKeyNone", "1", "sync")
    out = t.admin("queryMsgByKey", "-t", "AdmKeyNone", "-k", "no-such-key")
    rows = [r for r in _rows(out) if r and len(r[0]) == 32]
    return {"found": len(rows)}


@scenario("mqadmin", "updateTopic -p 4 (read only): topicRoute shows perm 4")
def adm_topic_read_only(t: Target) -> Observation:
    out = t.admin("updateTopic", "-c", t.cluster, "-t", "AdmPerm", "-r", "2", "-w", "2", "-p", "4")
    route = t.admin("topicRoute", "-t", "AdmPerm")
    perm = re.search(r'"perm"\s*:\s*(\d+)', route)
    return {"created": _ok(out), "perm": int(perm.group(1)) if perm else None}
