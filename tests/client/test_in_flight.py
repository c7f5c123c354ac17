"""Several send requests in flight: all stored, bounded, message groups in order, errors kept."""

from __future__ import annotations

import pytest

from broker_core import errors
from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess


def test_async_sends_are_all_stored_with_a_bounded_window(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint, max_in_flight=3) as client:
        client.create_topic("inflight", queues=1)
        pending = []
        for n in range(12):
            pending.append(
                client.send_batch_async("inflight", [b"%d-%d" % (n, i) for i in range(40)])
            )
            assert len(client.broker.producer.window.open) <= 3
        client.flush()
        offsets = sorted(r.offset for p in pending for r in p.result())
        assert offsets == list(range(12 * 40))


def test_a_message_group_keeps_its_order_across_requests(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint, max_in_flight=5) as client:
        client.create_topic("inflight-fifo", queues=1, message_type="FIFO")
        pending = [
            client.send_columns_async(
                "inflight-fifo", [b"g%03d" % n] * 20, message_groups=["g"] * 20
            )
            for n in range(15)
        ]
        client.flush()
        offsets = [r.offset for p in pending for r in p.result()]
        assert offsets == sorted(offsets) == list(range(300))


def test_a_failed_request_raises_and_the_others_are_stored(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint, max_in_flight=4) as client:
        client.create_topic("inflight-bad", queues=1)
        good = client.send_batch_async("inflight-bad", [b"a"] * 10)
        bad = client.send_batch_async("inflight-bad", [b"x" * (5 << 20)])
        after = client.send_batch_async("inflight-bad", [b"b"] * 10)
        with pytest.raises(errors.MessageTooLargeError):
            client.flush()
        with pytest.raises(errors.MessageTooLargeError):
            bad.result()
        assert sorted(r.offset for r in good.result() + after.result()) == list(range(20))


def test_sync_sends_wait_behind_async_ones(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint, max_in_flight=5) as client:
        client.create_topic("inflight-mixed", queues=1)
        early = client.send_batch_async("inflight-mixed", [b"e"] * 30)
        late = client.send_batch("inflight-mixed", [b"l"] * 5)
        assert early.done and len(early.result()) == 30 and len(late) == 5


def test_max_in_flight_must_be_positive() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        RocketMQClient("127.0.0.1:1", max_in_flight=0)


def test_bulk_sends_without_receipts_are_checked_and_stored_in_queue_blocks(
    broker: BrokerProcess,
) -> None:
    """``receipts=False`` gives [] but every message is stored; the broker fills queues in
    contiguous blocks with round robin's counts (each queue's offsets consecutive)."""
    with RocketMQClient(broker.endpoint, max_in_flight=4) as client:
        client.create_topic("inflight-blocks", queues=4)
        pending = [
            client.send_columns_async(
                "inflight-blocks", [b"b%d-%d" % (n, i) for i in range(10)], receipts=False
            )
            for n in range(6)
        ]
        client.flush()
        assert [p.result() for p in pending] == [[]] * 6
        per_queue = [
            [m.body for m in client.pull("GID_blocks", "inflight-blocks", q, 0, 100).messages]
            for q in range(4)
        ]
        assert [len(q) for q in per_queue] == [15, 15, 15, 15]  # round robin's counts
        assert sorted(b for q in per_queue for b in q) == sorted(
            b"b%d-%d" % (n, i) for n in range(6) for i in range(10)
        )
        for queue_bodies in per_queue:  # a request's rows in a queue are a block: i, i+1, …
            rows: dict[bytes, list[int]] = {}
            for body in queue_bodies:
                request, row = body.split(b"-")
                rows.setdefault(request, []).append(int(row))
            for got in rows.values():
                assert got == list(range(got[0], got[0] + len(got))) and len(got) in (2, 3)


def test_one_entry_answering_a_whole_batch_gives_a_receipt_per_message() -> None:
    """Apache RocketMQ's 5.5.0 proxy stores a multi-message SendMessage as one
    MessageBatch and answers one entry (the first offset, an offset-style id), as seen
    against it in tests/connector/test_connector_rocketmq.py; the sink failed on it."""
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2

    from broker_core.client import wire
    from broker_core.client.in_flight import receipts_of

    request, count = wire.encode_messages("t", [b"a", b"b", b"c"])
    ok = pb.Status(code=pb.Code.OK, message="OK")
    entry = service_pb2.SendResultEntry(status=ok, message_id="FD00ABCD", offset=7)
    response = service_pb2.SendMessageResponse(status=ok, entries=[entry])
    ids = [
        m.system_properties.message_id
        for m in service_pb2.SendMessageRequest.FromString(request).messages
    ]
    receipts = receipts_of(response, count, request)
    assert [(r.message_id, r.offset) for r in receipts] == list(zip(ids, [7, 8, 9], strict=True))
    assert len(set(ids)) == 3
    with pytest.raises(errors.RocketMQError, match="1 entries for 3 messages"):
        receipts_of(response, count)  # without the request: as before, refused
