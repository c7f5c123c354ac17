"""The remoting front end over an in-process broker, driven with our RemotingClient:
send (V1, V2, batch, DELAY), pull (encoding, long polling, filters, NOT_FOUND, OFFSET_MOVED),
heartbeats and pushed NOTIFY_CONSUMER_IDS_CHANGED, offsets, locks, send-back, admin."""

from __future__ import annotations

import json
import time

from broker_core.broker.pull import PullRequest
from broker_core.protocol.filters import MessageFilter
from broker_core.protocol.property_codec import encode_text
from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from broker_core.remoting_broker.msgcodec import MESSAGE_MAGIC_CODE
from tests.remoting_broker.conftest import PushRecorder, call, connect, heartbeat_body
from tests.remoting_records import decode_stored, encode_batch


def create_topic(client, topic: str, queues: int = 2) -> None:
    resp = call(
        client,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues), "perm": "6"},
    )
    assert resp.code == 0, resp.remark


def send_v2(client, topic: str, body: bytes, queue_id: int = 0, **props: str):
    fields = {
        "a": "pg",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": encode_text(props),
        "j": "0",
        "k": "false",
    }
    return call(client, RC.SEND_MESSAGE_V2, fields, body)


def pull(
    client,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    group: str = "g",
    sys_flag: int = 0,
    suspend_ms: int = 0,
    subscription: str = "",
    expression_type: str = "TAG",
    timeout_s: float = 5.0,
):
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": subscription,
        "subVersion": "0",
        "expressionType": expression_type,
    }
    return call(client, RC.PULL_MESSAGE, fields, timeout_s=timeout_s)


def test_send_v1_v2_and_pull_in_message_decoder_layout(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "t")
    resp = send_v2(c, "t", b"hello", TAGS="TagA", KEYS="k1")
    assert resp.code == 0 and resp.ext_fields["queueId"] == "0"
    assert resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["msgId"]
    v1 = call(
        c,
        RC.SEND_MESSAGE,
        {
            "producerGroup": "pg",
            "topic": "t",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "5",
            "flag": "7",
            "properties": encode_text({"TAGS": "TagB"}),
        },
        b"world",
    )
    assert v1.code == 0 and v1.ext_fields["queueOffset"] == "1"
    got = pull(c, "t", 0, 0)
    assert got.code == 0
    assert got.ext_fields["nextBeginOffset"] == "2" and got.ext_fields["maxOffset"] == "2"
    records = decode_stored(got.body)
    assert [r["body"] for r in records] == [b"hello", b"world"]
    assert all(r["magic"] == MESSAGE_MAGIC_CODE for r in records)
    assert records[0]["properties"]["TAGS"] == "TagA" and records[0]["properties"]["KEYS"] == "k1"
    assert records[0]["properties"]["UNIQ_KEY"] == resp.ext_fields["msgId"]
    assert [r["queue_offset"] for r in records] == [0, 1] and records[0]["topic"] == "t"
    assert records[1]["physical_offset"] > records[0]["physical_offset"]


def test_batch_send(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "tb")
    body = encode_batch([(0, f"b{i}".encode(), {"TAGS": "x", "KEYS": f"k{i}"}) for i in range(5)])
    resp = call(
        c,
        RC.SEND_BATCH_MESSAGE,
        {"a": "pg", "b": "tb", "e": "1", "f": "0", "g": "0", "h": "0", "i": "", "m": "true"},
        body,
    )
    assert resp.code == 0 and len(resp.ext_fields["msgId"].split(",")) == 5
    assert [r["body"] for r in decode_stored(pull(c, "tb", 1, 0).body)] == [
        f"b{i}".encode() for i in range(5)
    ]
    bad = call(c, RC.SEND_BATCH_MESSAGE, {"b": "tb", "e": "0"}, b"\x00\x00\x00\x30garbage")
    assert bad.code == ResponseCode.MESSAGE_ILLEGAL


def test_delay_level_is_held_then_delivered(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "td", 1)
    started = time.monotonic()
    assert send_v2(c, "td", b"later", DELAY="1").code == 0
    assert pull(c, "td", 0, 0).code == ResponseCode.PULL_NOT_FOUND  # held by the schedule
    got = pull(c, "td", 0, 0, sys_flag=2, suspend_ms=5_000, timeout_s=10)  # long polling
    assert got.code == 0 and decode_stored(got.body)[0]["body"] == b"later"
    assert time.monotonic() - started >= 0.9  # level 1 is 1 s


def test_long_polling_answers_later_without_blocking_the_connection(front, clients):
    c = connect(front, clients)
    create_topic(c, "tl", 1)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        parked = pool.submit(pull, c, "tl", 0, 0, sys_flag=2, suspend_ms=10_000, timeout_s=15)
        deadline = time.monotonic() + 5
        while front.ctx.broker.long_polling.parked_count < 1:  # the pull is parked
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert call(c, RC.GET_MAX_OFFSET, {"topic": "tl", "queueId": "0"}).code == 0
        assert not parked.done()  # still parked, yet the same connection was answered
        assert send_v2(c, "tl", b"wake").code == 0
        got = parked.result(10)
    assert got.code == 0 and decode_stored(got.body)[0]["body"] == b"wake"
    timed_out = pull(c, "tl", 0, 1, sys_flag=2, suspend_ms=300)
    assert timed_out.code == ResponseCode.PULL_NOT_FOUND
    assert timed_out.ext_fields["nextBeginOffset"] == "1"


def test_pull_offset_moved_and_filters(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "tf", 1)
    for i, tag in enumerate(["A", "B", "A"]):
        send_v2(c, "tf", f"m{i}".encode(), TAGS=tag, color="red" if i else "blue")
    moved = pull(c, "tf", 0, 99)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    assert moved.ext_fields["nextBeginOffset"] == "3"
    tags = pull(c, "tf", 0, 0, sys_flag=4, subscription="A")
    assert [r["body"] for r in decode_stored(tags.body)] == [b"m0", b"m2"]
    sql = pull(c, "tf", 0, 0, sys_flag=4, subscription="color = 'red'", expression_type="SQL92")
    assert [r["body"] for r in decode_stored(sql.body)] == [b"m1", b"m2"]
    bad = pull(c, "tf", 0, 0, sys_flag=4, subscription="color = ", expression_type="SQL92")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    # Without a subscription in the pull, the one from the group's heartbeat applies.
    call(c, RC.HEART_BEAT, body=heartbeat_body("cid-f", "gf", "tf", "B"))
    assert [r["body"] for r in decode_stored(pull(c, "tf", 0, 0, group="gf").body)] == [b"m1"]
    unknown = pull(c, "no-such-topic", 0, 0)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST


def test_heartbeats_membership_and_notifications(front: RemotingFrontEnd, clients):
    first_pushes = PushRecorder()
    a = connect(front, clients, first_pushes)
    b = connect(front, clients)
    create_topic(a, "tm")
    assert call(a, RC.HEART_BEAT, body=heartbeat_body("cid-a", "gm", "tm")).code == 0
    first_pushes.event.clear()
    first_pushes.pushed.clear()
    assert call(b, RC.HEART_BEAT, body=heartbeat_body("cid-b", "gm", "tm")).code == 0
    assert first_pushes.event.wait(5)  # a is told that gm changed
    notice = first_pushes.pushed[0]
    assert notice.code == RC.NOTIFY_CONSUMER_IDS_CHANGED and notice.is_oneway
    assert notice.ext_fields == {"consumerGroup": "gm"}
    listed = call(a, RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gm"})
    assert sorted(json.loads(listed.body)["consumerIdList"]) == ["cid-a", "cid-b"]
    first_pushes.event.clear()
    b.close()  # a closed connection unregisters its clients at once
    assert first_pushes.event.wait(5)
    listed = call(a, RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gm"})
    assert json.loads(listed.body)["consumerIdList"] == ["cid-a"]
    call(a, RC.UNREGISTER_CLIENT, {"clientID": "cid-a", "consumerGroup": "gm"})
    gone = call(a, RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "gm"})
    assert gone.code == ResponseCode.SYSTEM_ERROR
    assert front.ctx.broker.topics.get("%RETRY%gm") is not None


def test_offsets(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "to", 1)
    for i in range(4):
        send_v2(c, "to", f"o{i}".encode())
    q = {"topic": "to", "queueId": "0"}
    first = call(c, RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "go", **q})
    assert first.code == 0 and first.ext_fields["offset"] == "0"  # queue still starts at 0
    c.invoke_oneway(
        RemotingCommand.request(
            RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "go", "commitOffset": "3", **q}
        )
    )
    deadline = time.monotonic() + 5
    while (
        call(c, RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "go", **q}).ext_fields.get("offset")
        != "3"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert call(c, RC.GET_MAX_OFFSET, q).ext_fields["offset"] == "4"
    assert call(c, RC.GET_MIN_OFFSET, q).ext_fields["offset"] == "0"
    assert (
        call(c, RC.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": "0"}).ext_fields["offset"] == "0"
    )
    # A pull's piggy-backed commit (sysFlag bit 0) moves the group too.
    call_fields = {
        "consumerGroup": "go2",
        "topic": "to",
        "queueId": "0",
        "queueOffset": "4",
        "maxMsgNums": "1",
        "sysFlag": "1",
        "commitOffset": "2",
    }
    call(c, RC.PULL_MESSAGE, call_fields)
    assert (
        call(c, RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "go2", **q}).ext_fields["offset"] == "2"
    )


def test_lock_batch(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "tk")
    mqs = [{"topic": "tk", "brokerName": "broker-a", "queueId": i} for i in range(2)]
    body = json.dumps({"consumerGroup": "gk", "clientId": "c1", "mqSet": mqs}).encode()
    got = json.loads(call(c, RC.LOCK_BATCH_MQ, body=body).body)["lockOKMQSet"]
    assert sorted(m["queueId"] for m in got) == [0, 1]
    other = json.dumps({"consumerGroup": "gk", "clientId": "c2", "mqSet": mqs[:1]}).encode()
    assert json.loads(call(c, RC.LOCK_BATCH_MQ, body=other).body)["lockOKMQSet"] == []
    assert call(c, RC.UNLOCK_BATCH_MQ, body=body).code == 0
    assert len(json.loads(call(c, RC.LOCK_BATCH_MQ, body=other).body)["lockOKMQSet"]) == 1


def test_send_back_retries_then_dead_letters(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "tr", 1)
    send_v2(c, "tr", b"bad")
    record = decode_stored(pull(c, "tr", 0, 0).body)[0]
    back = {
        "group": "gr",
        "delayLevel": "1",
        "maxReconsumeTimes": "1",
        "offset": str(record["physical_offset"]),
    }
    assert call(c, RC.CONSUMER_SEND_MSG_BACK, back).code == 0
    retried = pull(c, "%RETRY%gr", 0, 0, sys_flag=2, suspend_ms=5_000, timeout_s=10)
    again = decode_stored(retried.body)[0]
    assert again["body"] == b"bad" and again["reconsume_times"] == 1
    assert again["properties"]["RETRY_TOPIC"] == "tr"
    back["offset"] = str(again["physical_offset"])
    assert call(c, RC.CONSUMER_SEND_MSG_BACK, back).code == 0  # reconsumed once = max
    dead = decode_stored(pull(c, "%DLQ%gr", 0, 0).body)
    assert [d["body"] for d in dead] == [b"bad"] and dead[0]["reconsume_times"] == 2


def test_admin_and_unknown_codes(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "ta", 3)
    topics = json.loads(call(c, RC.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert topics["ta"]["readQueueNums"] == 3
    info = json.loads(call(c, RC.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert info["brokerName"] == "broker-a" and info["remotingAddr"] == front.address
    assert call(c, 9999).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    missing = call(c, RC.SEND_MESSAGE_V2, {"a": "pg"}, b"x")
    assert missing.code == ResponseCode.MESSAGE_ILLEGAL and "topic" in missing.remark
    assert call(c, RC.GET_MAX_OFFSET, {"topic": "ta", "queueId": "0"}).code == 0  # still fine


def test_mqadmin_statistics_queries(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "ts", 2)
    for i in range(3):
        send_v2(c, "ts", f"s{i}".encode(), 0, KEYS=f"order-{i % 2}")
    call(
        c,
        RC.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "gs", "topic": "ts", "queueId": "0", "commitOffset": "1"},
    )
    stats = call(c, RC.GET_TOPIC_STATS_INFO, {"topic": "ts"}).body.decode()
    assert stats == (
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"ts"}:'
        '{"lastUpdateTimestamp":0,"maxOffset":3,"minOffset":0},'
        '{"brokerName":"broker-a","queueId":1,"topic":"ts"}:'
        '{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}}}'
    )
    consume = call(c, RC.GET_CONSUME_STATS, {"consumerGroup": "gs"}).body.decode()
    assert '"queueId":0,"topic":"ts"}:{"brokerOffset":3,"consumerOffset":1' in consume
    found = call(
        c,
        RC.QUERY_MESSAGE,
        {
            "topic": "ts",
            "key": "order-0",
            "maxNum": "10",
            "beginTimestamp": "0",
            "endTimestamp": str(2**62),
        },
    )
    assert sorted(r["body"] for r in decode_stored(found.body)) == [b"s0", b"s2"]
    none = call(c, RC.QUERY_MESSAGE, {"topic": "ts", "key": "nope", "maxNum": "10"})
    assert none.code == ResponseCode.QUERY_NOT_FOUND


def test_batch_fast_lane_stores_what_the_general_path_stores(front, clients, monkeypatch):
    c = connect(front, clients)
    create_topic(c, "fast", 1)
    create_topic(c, "slow", 1)
    items = [
        (
            0,
            f"body-{i}".encode(),
            {"UNIQ_KEY": f"U{i}", "TAGS": "t" if i % 2 else "u", "KEYS": f"k{i} x{i}", "user": "v"},
        )
        for i in range(6)
    ]
    fields = {"a": "pg", "e": "0", "f": "0", "g": "1234", "h": "0", "i": "", "m": "true"}
    fast = call(c, RC.SEND_BATCH_MESSAGE, {**fields, "b": "fast"}, encode_batch(items))
    monkeypatch.setattr("broker_core.remoting_broker.send.plain_columns", lambda *a, **k: None)
    slow = call(c, RC.SEND_BATCH_MESSAGE, {**fields, "b": "slow"}, encode_batch(items))
    assert fast.code == slow.code == 0 and fast.ext_fields["msgId"] == slow.ext_fields["msgId"]
    broker = front.ctx.broker
    a = broker.pulling.pull("g", PullRequest("fast", 0, 0, 10)).messages
    b = broker.pulling.pull("g", PullRequest("slow", 0, 0, 10)).messages
    keep = (
        "body",
        "properties",
        "flag",
        "sys_flag",
        "born_timestamp_ms",
        "born_host",
        "reconsume_times",
        "queue_offset",
        "body_crc",
    )
    assert [[getattr(m, k) for k in keep] for m in a] == [[getattr(m, k) for k in keep] for m in b]
    assert broker.query_by_key("fast", "x3")[0].body == b"body-3"  # KEYS are indexed
    tagged = broker.pulling.pull(
        "g", PullRequest("fast", 0, 0, 10, filter=MessageFilter("TAG", "t"))
    ).messages
    assert [m.body for m in tagged] == [b"body-1", b"body-3", b"body-5"]  # tag codes kept


def test_consumer_connection_list(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    create_topic(c, "tcx")
    assert call(c, RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "gcx"}).code == (
        ResponseCode.CONSUMER_NOT_ONLINE
    )
    call(c, RC.HEART_BEAT, body=heartbeat_body("cid-x", "gcx", "tcx", "TagA || TagB"))
    got = json.loads(call(c, RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "gcx"}).body)
    (conn,) = got["connectionSet"]
    assert conn["clientId"] == "cid-x" and conn["language"] == "PYTHON"
    assert got["subscriptionTable"]["tcx"]["subString"] == "TagA || TagB"
