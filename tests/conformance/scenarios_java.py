"""Java client scenarios (5.x gRPC client and 4.x remoting client).

Each scenario gets a fresh :class:`~tests.conformance.targets.Target` state for its own
topic and group names (the same names on both brokers) and returns what a user of the
client observes, normalised (sorted where order is not promised).
"""

from __future__ import annotations

from tests.conformance.registry import Observation, bodies, scenario
from tests.conformance.targets import Target

# ---- 5.x client (gRPC) -----------------------------------------------------------------


@scenario("java5", "send then SimpleConsumer receive+ack (group made before the consumer)")
def j5_send_simple(t: Target) -> Observation:
    t.topic("J5Simple")
    t.group("GJ5Simple")
    sent = t.c5("send", "J5Simple", "3")
    got = t.c5("simple", "J5Simple", "GJ5Simple", "3", "40")
    attempts = sorted({e["attempt"] for e in got.of("received")}, key=str)
    return {
        "sent": bodies(sent, "sent"),
        "received": bodies(got),
        "attempts": attempts,
        "error": got.error,
    }


@scenario("java5", "PushConsumer started after the send, group made by updateSubGroup first")
def j5_push_after_send(t: Target) -> Observation:
    t.topic("J5Push")
    t.group("GJ5Push")
    t.c5("send", "J5Push", "2")
    got = t.c5("push", "J5Push", "GJ5Push", "2", "40")
    return {"received": bodies(got), "error": got.error}


@scenario("java5", "FIFO: one message group through a FIFO SimpleConsumer group, in order")
def j5_fifo(t: Target) -> Observation:
    t.topic("J5Fifo", 4, "-o", "true")
    t.group("GJ5Fifo", "-o", "true")
    t.c5("send", "J5Fifo", "4", "fifo:g1")
    got = t.c5("simple", "J5Fifo", "GJ5Fifo", "4", "60")
    return {"order": [e["body"] for e in got.of("received")], "error": got.error}


@scenario("java5", "delay: a message with a delivery time 3 s ahead arrives")
def j5_delay(t: Target) -> Observation:
    t.topic("J5Delay", 4, "-a", "+message.type=DELAY")
    t.group("GJ5Delay")
    sent = t.c5("send", "J5Delay", "1", "delay:3000")
    got = t.c5("simple", "J5Delay", "GJ5Delay", "1", "40")
    return {"sent_error": sent.error, "received": bodies(got), "error": got.error}


@scenario("java5", "SimpleConsumer with a tag expression gets only that tag")
def j5_tag_filter(t: Target) -> Observation:
    t.topic("J5Tag")
    t.group("GJ5Tag")
    t.c5("send", "J5Tag", "2", "tag:A")
    t.c5("send", "J5Tag", "1", "tag:B")
    got = t.c5("simple", "J5Tag", "GJ5Tag", "3", "12", "B")
    return {"received": [(e["body"], e["tag"]) for e in got.of("received")], "error": got.error}


@scenario("java5", "transaction committed at once is delivered")
def j5_txn_commit(t: Target) -> Observation:
    t.topic("J5TxnC", 4, "-a", "+message.type=TRANSACTION")
    t.group("GJ5TxnC")
    sent = t.c5("txn", "J5TxnC", "commit")
    got = t.c5("simple", "J5TxnC", "GJ5TxnC", "1", "30")
    return {"sent_error": sent.error, "received": bodies(got)}


@scenario("java5", "transaction rolled back is never delivered")
def j5_txn_rollback(t: Target) -> Observation:
    t.topic("J5TxnR", 4, "-a", "+message.type=TRANSACTION")
    t.group("GJ5TxnR")
    sent = t.c5("txn", "J5TxnR", "rollback")
    got = t.c5("simple", "J5TxnR", "GJ5TxnR", "1", "8")
    return {"sent_error": sent.error, "received": bodies(got)}


@scenario("java5", "SimpleConsumer of a group nobody created")
def j5_group_missing(t: Target) -> Observation:
    t.topic("J5NoGroup")
    got = t.c5("simple", "J5NoGroup", "GJ5NeverMade", "1", "5")
    return {"started": got.error is None, "received": bodies(got)}


# ---- 4.x client (remoting) -------------------------------------------------------------


def _send4(t: Target, topic: str, mode: str, count: int = 3) -> Observation:
    t.topic(topic)
    sent = t.c4("send", topic, str(count), mode)
    got = t.c4("push", topic, f"G{topic}", str(count), "40", "first")
    statuses = sorted({str(e.get("status", "")) for e in sent.of("sent") + sent.of("sent_batch")})
    return {"statuses": statuses, "received": bodies(got), "error": sent.error or got.error}


@scenario("java4", "DefaultMQProducer sync send, push consumer (clustering) receives")
def j4_sync(t: Target) -> Observation:
    return _send4(t, "J4Sync", "sync")


@scenario("java4", "DefaultMQProducer async send with callbacks")
def j4_async(t: Target) -> Observation:
    return _send4(t, "J4Async", "async")


@scenario("java4", "DefaultMQProducer oneway send")
def j4_oneway(t: Target) -> Observation:
    return _send4(t, "J4Oneway", "oneway")


@scenario("java4", "DefaultMQProducer batch send")
def j4_batch(t: Target) -> Observation:
    return _send4(t, "J4Batch", "batch")


@scenario("java4", "push consumer (CONSUME_FROM_LAST_OFFSET, new group) started after the send")
def j4_push_after_send(t: Target) -> Observation:
    t.topic("J4Last")
    t.group("GJ4Last")
    t.c4("send", "J4Last", "2", "sync")
    got = t.c4("push", "J4Last", "GJ4Last", "2", "40", "clustering")
    return {"received": bodies(got), "error": got.error}


@scenario("java4", "orderly selector send, MessageListenerOrderly keeps per-queue order")
def j4_orderly(t: Target) -> Observation:
    t.topic("J4Order")
    sent = t.c4("send", "J4Order", "6", "orderly")
    got = t.c4("push", "J4Order", "GJ4Order", "6", "40", "orderly")
    queue_of = {e["body"]: e["queue_key"] for e in sent.of("sent")}
    per_key: dict[str, list[object]] = {}
    for e in got.of("received"):
        per_key.setdefault(str(queue_of.get(e["body"])), []).append(e["body"])
    return {"per_key_order": per_key, "error": sent.error or got.error}


@scenario("java4", "push consumer with a tag expression")
def j4_tag_filter(t: Target) -> Observation:
    t.topic("J4Tag")
    t.c4("send", "J4Tag", "2", "tag:A")
    t.c4("send", "J4Tag", "1", "tag:B")
    got = t.c4("push", "J4Tag", "GJ4Tag", "3", "12", "tag:B")
    return {"received": [(e["body"], e["tag"]) for e in got.of("received")], "error": got.error}


@scenario("java4", "push consumer with an SQL92 selector on a user property")
def j4_sql_filter(t: Target) -> Observation:
    t.topic("J4Sql")
    t.c4("send", "J4Sql", "1", "prop:a=1")
    t.c4("send", "J4Sql", "1", "prop:a=2")
    got = t.c4("push", "J4Sql", "GJ4Sql", "2", "12", "sql:a = 2")
    return {"received": bodies(got), "error": got.error}


@scenario("java4", "transaction committed by the local transaction")
def j4_txn_commit(t: Target) -> Observation:
    t.topic("J4TxnC")
    sent = t.c4("txn", "J4TxnC", "commit")
    got = t.c4("push", "J4TxnC", "GJ4TxnC", "1", "30", "first")
    return {"half": sent.of("half_sent"), "received": bodies(got), "error": sent.error}


@scenario("java4", "transaction left UNKNOW, committed by the check-back")
def j4_txn_check(t: Target) -> Observation:
    t.topic("J4TxnK")
    sent = t.c4("txn", "J4TxnK", "check-commit", timeout_s=150)
    got = t.c4("push", "J4TxnK", "GJ4TxnK", "1", "30", "first")
    checked = bool(sent.of("checked"))
    return {"checked": checked, "received": bodies(got), "error": sent.error}


@scenario("java4", "broadcasting push consumer receives every message")
def j4_broadcast(t: Target) -> Observation:
    t.topic("J4Bcast")
    t.c4("send", "J4Bcast", "3", "sync")
    got = t.c4("push", "J4Bcast", "GJ4Bcast", "3", "40", "broadcasting")
    return {"received": bodies(got), "error": got.error}


@scenario("java4", "RECONSUME_LATER with maxReconsumeTimes=1: one retry, then the DLQ")
def j4_retry_dlq(t: Target) -> Observation:
    t.topic("J4Retry")
    t.c4("send", "J4Retry", "1", "sync")
    got = t.c4("push", "J4Retry", "GJ4Retry", "2", "60", "retry:1")
    status = t.admin("topicStatus", "-t", "%DLQ%GJ4Retry")
    dlq_rows = [line for line in status.splitlines() if line.strip() and not line.startswith("#")]
    reconsume = [e["reconsume"] for e in got.of("received")]
    return {"reconsume_times": reconsume, "dlq_has_queue": bool(dlq_rows), "error": got.error}


@scenario("java4", "DefaultLitePullConsumer: assign, seek to 0, poll, commitSync")
def j4_lite_pull(t: Target) -> Observation:
    t.topic("J4Lite")
    t.c4("send", "J4Lite", "3", "sync")
    got = t.c4("lite", "J4Lite", "GJ4Lite", "3", "30")
    return {"received": bodies(got), "committed": got.of("committed"), "error": got.error}


@scenario("java4", "producer and consumer with message trace on: trace records stored")
def j4_trace(t: Target) -> Observation:
    t.topic("J4Trace")
    sent = t.c4("send", "J4Trace", "2", "sync", "trace")
    got = t.c4("push", "J4Trace", "GJ4Trace", "2", "30", "first", "trace")
    status = t.admin("topicStatus", "-t", "RMQ_SYS_TRACE_TOPIC")
    has_trace = any(_max_offset(line) > 0 for line in status.splitlines())
    return {"sent": len(sent.of("sent")), "received": bodies(got), "trace_stored": has_trace}


@scenario("java4", "message trace on: mqadmin queryMsgTraceById shows the Pub and the Sub")
def j4_trace_by_id(t: Target) -> Observation:
    t.topic("J4TraceId")
    run = t.c4("traced", "J4TraceId", "GJ4TraceId", "60")
    sent = run.of("sent")
    if not sent:
        return {"sent": False, "error": run.error}
    out = t.admin("queryMsgTraceById", "-i", str(sent[0]["msg_id"]))
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["Pub"], ["Sub"])]
    return {
        "consumed": [e["value"] for e in run.of("consumed")],
        "trace_stored": [(e["type"], e["value"]) for e in run.of("trace_stored")],
        "rows": [(r[0], r[1], r[-1]) for r in rows],  # type, group, status
        "error": run.error,
    }


@scenario("java4", "send to a topic nobody created (autoCreateTopicEnable)")
def j4_auto_create(t: Target) -> Observation:
    sent = t.c4("send", "J4AutoMade", "1", "sync")
    return {"statuses": [e.get("status") for e in sent.of("sent")], "error": bool(sent.error)}


def _max_offset(line: str) -> int:
    """topicStatus row: ``#Broker Name  #QID  #Min Offset  #Max Offset  #Last Updated``."""
    cells = line.split()
    if len(cells) < 4 or not cells[1].isdigit():
        return 0
    try:
        return int(cells[3])
    except ValueError:
        return 0


@scenario("java5", "transaction left unknown, committed by the producer's check-back")
def j5_txn_check(t: Target) -> Observation:
    t.topic("J5TxnK", 4, "-a", "+message.type=TRANSACTION")
    t.group("GJ5TxnK")
    sent = t.c5("txn", "J5TxnK", "check-commit", timeout_s=150)
    got = t.c5("simple", "J5TxnK", "GJ5TxnK", "1", "30")
    return {"check_seen": sent.of("check_seen"), "received": bodies(got), "error": sent.error}


def _roundtrip5(t: Target, topic: str, mode: str, tags: str = "*", *extra: str) -> Observation:
    """A SimpleConsumer that has received once (so it has its position), then the send:
    what arrives does not hang on where a new group starts (see j5_send_simple)."""
    t.topic(topic, 4, *extra)
    t.group(f"G{topic}", *(["-o", "true"] if mode.startswith("fifo") else []))
    got = t.c5("simple", topic, f"G{topic}", "3", "40", tags, mode)
    seen = [[e["body"], e["tag"]] for e in got.of("received")]
    return {"received": seen if mode.startswith("fifo") else sorted(seen), "error": got.error}


@scenario("java5", "SimpleConsumer receiving before the send: normal messages")
def j5_live_normal(t: Target) -> Observation:
    return _roundtrip5(t, "J5LiveN", "normal")


@scenario("java5", "SimpleConsumer receiving before the send: FIFO group, order kept")
def j5_live_fifo(t: Target) -> Observation:
    return _roundtrip5(t, "J5LiveF", "fifo:g1", "*", "-o", "true", "-a", "+message.type=FIFO")


@scenario("java5", "SimpleConsumer receiving before the send: 2 s delayed messages")
def j5_live_delay(t: Target) -> Observation:
    return _roundtrip5(t, "J5LiveD", "delay:2000", "*", "-a", "+message.type=DELAY")


@scenario("java5", "SimpleConsumer with tag expression 'B' receiving before tag-B sends")
def j5_live_tag(t: Target) -> Observation:
    return _roundtrip5(t, "J5LiveT", "tag:B", "B")
