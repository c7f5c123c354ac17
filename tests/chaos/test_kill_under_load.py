"""SIGKILL the broker under load, restart it on the same store, and count what survived.

Three producer threads send uniquely numbered messages: one with the official ``rocketmq``
Producer (one message per request), one with our client's ``send_batch`` (16 and 64
per request, in turn: SendMessage's two converters), one with our client's bulk send
(SendBulk, 64 per request, up to 4 requests in flight). All end in the broker's one send
path; each producer must have had sends acknowledged. Each records
a message only when its send returned OK. A seeded RNG picks how many more
acknowledgements to wait for before each SIGKILL (plus a few ms of jitter);
the broker restarts on the same port and store, and the producers carry on once their
channels reconnect. At the end every queue is read back by offset.

* ``--flush sync``: no acknowledged message may be missing.
* ``--flush async``: whatever is missing must have been acknowledged within the flush
  interval (plus slack) before a kill. A SIGKILL leaves the page cache intact, so in
  practice nothing is lost here either; only an OS crash would lose that window.

Stored-but-unacknowledged messages are allowed (at least once) and reported. Duplicates
must be **none**: a kill can take the answers of the requests then in flight, and every
producer here retries such a send with the same message ids (the official client sets a
message's id once, before its attempts; our client re-sends the same encoded request, ids
included; a send that fails for good is never sent again by the loops), and the broker
answers a repeated id from its dedup window (``broker/dedup.py``, on by default), which
recovery rebuilds from the log after the kill. (Whether a kill here catches a send between
its store and its answer is chance, so 0 duplicates here does not prove dedup: the
deterministic proof, with a dedup-off control that does store the retry twice, is
``tests/broker/test_dedup_wire.py``.) What this test does not cover, and where a
copy can still appear: a retry that goes to another broker group (a cluster client moving
on), a re-send under a new id (an application's own retry), a repeat older than
``dedup_window_ms``; and on the read side a POP redelivery (a delivery not acked in time),
which is not a stored duplicate (here every queue is read once by offset).

Every send failure must be one a restart explains (``send_loop.restart_explains``) and
come between a kill and ``FAILURE_GRACE_S`` after the restart was ready; anything else
fails the test. The sends and reads also go through the history checker
(``tests/history.py``): no phantom reads, and for ``--flush sync`` nothing acked lost.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.client.in_flight import PendingSend
from tests.chaos.load import (
    AckLog,
    ChaosBroker,
    KillPlan,
    audit,
    dropped_bytes,
    kill_cycles,
    outside_restarts,
    read_back,
)
from tests.history import OK, check
from tests.send_loop import LoopThreads

TOPIC = "chaos-kill"
SEED = 20_240_607
BATCH_SIZES = (16, 64)  # below and above the fast lane threshold (send_message.py)
FLUSH_INTERVAL_MS = 200
LOSS_SLACK_S = 0.5  # scheduling slack on a shared 2-core machine
RETRY_PAUSE_S = 0.02  # between failed sends while the broker is down
CLIENT_TIMEOUT_S = 5
BULK_IN_FLIGHT = 4
# a send begun before the restart was ready may fail up to one client timeout after it
# (plus the official client's reconnect backoff, ~1 s, and scheduling slack)
FAILURE_GRACE_S = CLIENT_TIMEOUT_S + 3


SHORT = KillPlan(kills=2, min_acks=30, max_acks=200)
FULL = KillPlan(kills=30, min_acks=50, max_acks=1_500)


class Producers:
    """The producer threads (the official client; our send_batch; our bulk send with
    requests in flight); failures other than send errors are kept in ``errors``."""

    def __init__(self, endpoint: str, acks: AckLog) -> None:
        self.endpoint = endpoint
        self.acks = acks
        self.threads = LoopThreads(
            [("official", self._official), ("batch", self._batch), ("bulk", self._bulk)]
        )
        self.stop = self.threads.stop
        self.start, self.join = self.threads.start, self.threads.join

    def _official(self) -> None:
        producer = Producer(ClientConfiguration(self.endpoint, Credentials()), [TOPIC])
        producer.startup()

        def send_one(body: bytes) -> str:
            msg = Message()
            msg.topic, msg.body = TOPIC, body
            return str(producer.send(msg).message_id)

        try:  # a send failing while the broker is down or killed mid-request: not acked
            self.acks.send_until(self.stop, b"A", send_one, RETRY_PAUSE_S)
        finally:
            producer.shutdown()

    def _batch(self) -> None:
        with RocketMQClient(
            self.endpoint, timeout_s=CLIENT_TIMEOUT_S, retry_backoff_s=0.05
        ) as client:
            seq = 0
            for size in itertools.cycle(BATCH_SIZES):
                if self.stop.is_set():
                    break
                bodies = [b"B-%08d" % (seq + i) for i in range(size)]
                seq += size
                self.acks.invoke(bodies)
                try:
                    receipts = client.send_batch(TOPIC, [OutgoingMessage(b) for b in bodies])
                except Exception as exc:
                    self.acks.record_failure(exc)
                    time.sleep(RETRY_PAUSE_S)
                    continue
                for body, receipt in zip(bodies, receipts, strict=True):
                    self.acks.record(body, receipt.message_id)

    def _bulk(self) -> None:
        """Bulk sends (SendBulk), up to 4 requests in flight; acked as each one finishes."""
        with RocketMQClient(
            self.endpoint,
            timeout_s=CLIENT_TIMEOUT_S,
            retry_backoff_s=0.05,
            max_in_flight=BULK_IN_FLIGHT,
        ) as client:
            sent: deque[tuple[list[bytes], PendingSend]] = deque()
            seq = 0
            while not self.stop.is_set() or sent:
                if not self.stop.is_set():
                    bodies = [b"C-%08d" % (seq + i) for i in range(BATCH_SIZES[1])]
                    seq += len(bodies)
                    self.acks.invoke(bodies)
                    try:
                        sent.append((bodies, client.send_columns_async(TOPIC, bodies)))
                    except Exception as exc:  # the first (synchronous) bulk send failed
                        self.acks.record_failure(exc)
                        time.sleep(RETRY_PAUSE_S)
                while sent and (sent[0][1].done or self.stop.is_set()):
                    self._ack_bulk(*sent.popleft())

    def _ack_bulk(self, bodies: list[bytes], pending: PendingSend) -> None:
        try:
            receipts = pending.result()
        except Exception as exc:
            self.acks.record_failure(exc)
            time.sleep(RETRY_PAUSE_S)
            return
        for body, receipt in zip(bodies, receipts, strict=True):
            self.acks.record(body, receipt.message_id)


def loss_window_s(acked_at_s: float, kills: list[float]) -> float:
    """Seconds between an acknowledgement and the first kill after it."""
    return min((k - acked_at_s for k in kills if k >= acked_at_s), default=float("inf"))


def lost_per_kill(acked_at_s: list[float], kills: list[float]) -> list[int]:
    """How many of the lost messages each kill took (by the first kill after the ack)."""
    counts = [0] * len(kills)
    for at in acked_at_s:
        after = [i for i, k in enumerate(kills) if k >= at]
        if after:
            counts[after[0]] += 1
    return counts


@pytest.mark.parametrize(
    ("flush", "plan"),
    [
        pytest.param("sync", SHORT, id="sync-short"),
        pytest.param("async", SHORT, id="async-short"),
        pytest.param("sync", FULL, id="sync-full", marks=pytest.mark.slow),
        pytest.param("async", FULL, id="async-full", marks=pytest.mark.slow),
    ],
)
def test_acknowledged_messages_survive_sigkill(
    tmp_path: Path, flush: str, plan: KillPlan, chaos_figures
) -> None:
    broker = ChaosBroker(
        tmp_path, flush=flush, config={"store": {"flush_interval_ms": FLUSH_INTERVAL_MS}}
    )
    broker.start()
    acks = AckLog()
    producers = Producers(broker.endpoint, acks)
    started_s = time.monotonic()
    try:
        with RocketMQClient(broker.endpoint) as admin:
            admin.create_topic(TOPIC, queues=4)
        producers.start()
        kills = kill_cycles(broker, plan, acks, SEED)
        assert acks.wait_for_count(acks.count() + plan.min_acks, plan.ack_timeout_s), (
            "producers did not resume after the last restart\n" + broker.log_tail()
        )
        producers.join()
        with RocketMQClient(broker.endpoint, timeout_s=30) as reader:
            stored = read_back(reader, TOPIC)
    except BaseException:
        producers.stop.set()
        broker.kill()
        raise
    assert broker.stop() == 0, broker.log_tail()

    acked = acks.snapshot()
    result = audit(acked, stored)
    for message in stored:
        acks.history.read(message.body.decode(), f"q{message.queue_id}")
    report = check(acks.history)
    unexplained = outside_restarts(acks.failures, kills, broker.ready_s[1:], FAILURE_GRACE_S)
    summaries = broker.recovery_summaries()
    windows = [loss_window_s(acked[body].acked_at_s, kills) for body in result.lost]
    # sends acknowledged only after a kill they were in flight at: the client's retries
    # (or a first attempt that outlived the kill); a stored first copy was answered from
    # the dedup window
    across = {
        op.msg_id
        for k in kills
        for op in acks.history.in_flight_at(k)
        if op.outcome == OK and op.completed_at >= k
    }
    chaos_figures(
        f"kill-under-load flush={flush}",
        cycles=len(kills),
        acknowledged=result.acknowledged,
        stored=result.stored,
        lost=len(result.lost),
        duplicates=result.duplicates,
        acked_across_a_kill=len(across),
        unacked_stored=result.unacked_stored,
        failed_sends=dict(acks.failed_sends),
        max_lost_per_kill=max(lost_per_kill([acked[b].acked_at_s for b in result.lost], kills)),
        max_loss_window_ms=round(max(windows, default=0) * 1000, 1),
        recovered_dropped_bytes=dropped_bytes(summaries),
        history=report.summary(),
        seconds=round(time.monotonic() - started_s, 1),
    )
    assert not unexplained, (
        f"sends failed away from any kill (kills {kills}, restarts ready "
        f"{broker.ready_s[1:]}): {unexplained[:5]}"
    )
    assert report.phantoms == [] and report.failed_read == [], report.violations()
    assert report.duplicates == {}, f"retried sends stored twice: {report.summary()}"
    assert result.duplicates == 0
    assert len(kills) == plan.kills
    for prefix, producer in ((b"A-", "official"), (b"B-", "batch"), (b"C-", "bulk in flight")):
        assert any(body.startswith(prefix) for body in acked), f"no {producer} send was acked"
    assert all(s.startswith("abnormal shutdown: True") for s in summaries[1:]), summaries
    assert result.acknowledged > plan.kills * plan.min_acks
    if flush == "sync":
        assert result.lost == [], f"{len(result.lost)} acknowledged messages lost"
        report.assert_valid()
    else:
        bound_s = FLUSH_INTERVAL_MS / 1000 + LOSS_SLACK_S
        late = [w for w in windows if w > bound_s]
        assert not late, (
            f"{len(late)} lost messages were acknowledged more than "
            f"{bound_s} s before a kill (windows {sorted(late)[:5]})"
        )
