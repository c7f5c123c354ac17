"""Official Python client scenarios (rocketmq-python-client, gRPC): the driver is
``tests/conformance/pyclient.py``, run as a child process against each broker's gRPC
endpoint (RocketMQ's proxy, ours). Topics and groups are made first with mqadmin, as a
RocketMQ user must (its proxy refuses a gRPC consumer of a group nobody created)."""

from __future__ import annotations

from tests.conformance.registry import Observation, bodies, scenario
from tests.conformance.targets import Target


def _error(run_error: dict[str, object] | None) -> object:
    return None if run_error is None else {k: run_error.get(k) for k in ("kind", "code")}


@scenario("python", "send 3, SimpleConsumer receive + ack each")
def py_send_receive(t: Target) -> Observation:
    t.topic("PySR")
    t.group("GPySR")
    sent = t.py("send", "PySR", "3")
    got = t.py("receive", "PySR", "GPySR", "3", "40")
    return {
        "sent": bodies(sent, "sent"),
        "received": bodies(got),
        "attempts": sorted({e["attempt"] for e in got.of("received")}, key=str),
        "error": _error(sent.error or got.error),
    }


@scenario("python", "nack (invisible duration changed to 1 s): redelivered, attempt 2")
def py_nack_redelivery(t: Target) -> Observation:
    t.topic("PyNack")
    t.group("GPyNack")
    t.py("send", "PyNack", "1")
    got = t.py("nack", "PyNack", "GPyNack", "40")
    return {
        "deliveries": [(e["body"], e["attempt"]) for e in got.of("received")],
        "acked": bool(got.of("acked")),
        "error": _error(got.error),
    }


@scenario("python", "ack with the receipt handle a change of invisible time replaced")
def py_stale_ack(t: Target) -> Observation:
    t.topic("PyStale")
    t.group("GPyStale")
    t.py("send", "PyStale", "1")
    got = t.py("stale", "PyStale", "GPyStale", "40")
    shown = ("ok", "kind", "code")
    return {
        "new_handle": [e["new_handle"] for e in got.of("changed")],
        "stale_ack": [{k: e.get(k) for k in shown} for e in got.of("stale_ack")],
        "fresh_ack": [{k: e.get(k) for k in shown} for e in got.of("fresh_ack")],
        "error": _error(got.error),
    }


@scenario("python", "FIFO: one message group through a FIFO group, in send order")
def py_fifo(t: Target) -> Observation:
    t.topic("PyFifo", 4, "-o", "true", "-a", "+message.type=FIFO")
    t.group("GPyFifo", "-o", "true")
    t.py("send", "PyFifo", "5", "fifo:g1")
    got = t.py("receive", "PyFifo", "GPyFifo", "5", "60")
    return {
        "order": [e["body"] for e in got.of("received")],
        "groups": sorted({str(e["group"]) for e in got.of("received")}),
        "error": _error(got.error),
    }


@scenario("python", "delay: a message 2 s ahead arrives, not before its time")
def py_delay(t: Target) -> Observation:
    t.topic("PyDelay", 4, "-a", "+message.type=DELAY")
    t.group("GPyDelay")
    sent = t.py("send", "PyDelay", "1", "delay:2000")
    got = t.py("receive", "PyDelay", "GPyDelay", "1", "40")
    return {
        "sent": bodies(sent, "sent"),
        "received": bodies(got),
        "early": [e["early"] for e in got.of("received")],
        "error": _error(sent.error or got.error),
    }


@scenario("python", "transaction left open, committed by the checker on check-back")
def py_txn_check_commit(t: Target) -> Observation:
    t.topic("PyTxnK", 4, "-a", "+message.type=TRANSACTION")
    t.group("GPyTxnK")
    sent = t.py("txn", "PyTxnK", "check-commit", "90", timeout_s=150)
    got = t.py("receive", "PyTxnK", "GPyTxnK", "1", "30")
    return {
        "check_seen": [e["value"] for e in sent.of("check_seen")],
        "checked": bodies(sent, "checked")[:1],
        "received": bodies(got),
        "error": _error(sent.error),
    }


@scenario("python", "transaction left open, rolled back by the checker: never delivered")
def py_txn_check_rollback(t: Target) -> Observation:
    t.topic("PyTxnR", 4, "-a", "+message.type=TRANSACTION")
    t.group("GPyTxnR")
    sent = t.py("txn", "PyTxnR", "check-rollback", "90", timeout_s=150)
    got = t.py("receive", "PyTxnR", "GPyTxnR", "1", "8")
    return {
        "check_seen": [e["value"] for e in sent.of("check_seen")],
        "received": bodies(got),
        "error": _error(sent.error),
    }


@scenario("python", "transaction committed at once is delivered")
def py_txn_commit(t: Target) -> Observation:
    t.topic("PyTxnC", 4, "-a", "+message.type=TRANSACTION")
    t.group("GPyTxnC")
    sent = t.py("txn", "PyTxnC", "commit", "0")
    got = t.py("receive", "PyTxnC", "GPyTxnC", "1", "30")
    return {"half_sent": bool(sent.of("half_sent")), "received": bodies(got)}


@scenario("python", "SimpleConsumer with tag expression 'B' gets only tag B")
def py_tag_filter(t: Target) -> Observation:
    t.topic("PyTag")
    t.group("GPyTag")
    t.py("send", "PyTag", "2", "tag:A")
    t.py("send", "PyTag", "1", "tag:B")
    got = t.py("receive", "PyTag", "GPyTag", "3", "12", "B")
    return {"received": [(e["body"], e["tag"]) for e in got.of("received")]}


def _bad(t: Target, kind: str, topic: str) -> Observation:
    run = t.py("bad", kind, topic, f"G{topic}")
    results = [{k: e.get(k) for k in ("ok", "kind", "code", "stage")} for e in run.of("result")]
    return {"result": results, "error": _error(run.error)}


@scenario("python", "bad request: send to a topic nobody created")
def py_bad_missing_topic(t: Target) -> Observation:
    return _bad(t, "missing-topic", "PyNeverMade")


@scenario("python", "bad request: a message group on a NORMAL topic")
def py_bad_fifo_on_normal(t: Target) -> Observation:
    t.topic("PyNormF")
    return _bad(t, "fifo-on-normal", "PyNormF")


@scenario("python", "bad request: a delivery time on a NORMAL topic")
def py_bad_delay_on_normal(t: Target) -> Observation:
    t.topic("PyNormD")
    return _bad(t, "delay-on-normal", "PyNormD")


@scenario("python", "bad request: receive with an SQL92 expression that does not parse")
def py_bad_sql(t: Target) -> Observation:
    t.topic("PyBadSql")
    t.group("GPyBadSql")
    return _bad(t, "bad-sql", "PyBadSql")


@scenario("python", "bad request: receive with a 2-day invisible duration")
def py_bad_invisible(t: Target) -> Observation:
    t.topic("PyBadInv")
    t.group("GPyBadInv")
    return _bad(t, "long-invisible", "PyBadInv")


@scenario("python", "receive with a 2 s long-polling time (the client's deadline 5 s)")
def py_short_polling(t: Target) -> Observation:
    t.topic("PyShortPoll")
    t.group("GPyShortPoll")
    return _bad(t, "short-polling", "PyShortPoll")


@scenario("python", "delivery time in ms where the client wants seconds (a 5 s delay)")
def py_delay_in_ms(t: Target) -> Observation:
    t.topic("PyDelayMs", 4, "-a", "+message.type=DELAY")
    t.group("GPyDelayMs")
    sent = t.py("send", "PyDelayMs", "1", "delay-ms")
    got = t.py("receive", "PyDelayMs", "GPyDelayMs", "1", "30")
    return {"sent": bodies(sent, "sent"), "error": _error(sent.error), "received": bodies(got)}
