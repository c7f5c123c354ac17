"""Send routing: which message type a message is and where each sent message goes.

A transactional message becomes a half message, a delay level goes to the schedule topic,
a future delivery time to the timer, everything else is appended in one batch; queues the
producer left open are chosen by message group (FIFO) or round robin. The broker owns one
:class:`Sender` and checks mastership before calling it.

Threads: like the broker, callable from any thread (the round-robin counter is advisory).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from broker_core.broker.lite import PROPERTY_LITE_TOPIC, PROPERTY_PRIORITY, route
from broker_core.broker.retry import delay_level_ms
from broker_core.broker.system_topics import check_client_send
from broker_core.broker.timer.schedule import ScheduleService
from broker_core.broker.timer.timer import TimerService
from broker_core.broker.topics import TopicConfig, TopicManager, select_write_queue
from broker_core.broker.transaction.transaction import TransactionService
from broker_core.errors import InvalidArgumentError
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
    new_message_id,
)
from broker_core.store.columns import ColumnBatch, queue_blocks, spread_in_blocks
from broker_core.store.message_store import MessageStore


@dataclass(frozen=True, slots=True)
class SendResult:
    """What a producer is told about one sent message."""

    message_id: str
    topic: str
    queue_id: int
    queue_offset: int  # in the queue it went to now (the schedule/timer/half topic if held)
    transaction_id: str = ""
    recall_handle: str = ""  # set for messages held by the timer; cancels their delivery
    half_offset: int = -1  # commitlog offset of a transaction's half record (else -1)
    physical_offset: int = -1  # commitlog offset of the unit stored (``dedup`` keeps it)


def message_type(msg: Message) -> str:
    """RocketMQ 5 topic message type a message needs, in RocketMQ's precedence:
    TRANSACTION, DELAY, FIFO, PRIORITY, LITE or NORMAL."""
    props = msg.properties
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return "TRANSACTION"
    if props.get(PROPERTY_DELAY_LEVEL) or props.get(PROPERTY_DELIVER_TIME_MS):
        return "DELAY"
    if props.get(PROPERTY_MESSAGE_GROUP):
        return "FIFO"
    if props.get(PROPERTY_PRIORITY) is not None:
        return "PRIORITY"
    if props.get(PROPERTY_LITE_TOPIC):
        return "LITE"
    return "NORMAL"


class Sender:
    """Routes and stores sent messages for one broker.

    ``after_put`` is called after each send has been appended (the broker waits for
    replication there); ``clock_ms`` is the broker's clock.
    """

    def __init__(
        self,
        store: MessageStore,
        topics: TopicManager,
        transactions: TransactionService,
        schedule: ScheduleService,
        timer: TimerService,
        *,
        clock_ms: Callable[[], int],
        after_put: Callable[[], None],
    ) -> None:
        self.store = store
        self.topics = topics
        self.transactions = transactions
        self.schedule = schedule
        self.timer = timer
        self._clock_ms = clock_ms
        self._after_put = after_put
        self._send_counter = 0

    def send(
        self, messages: Sequence[Message], *, producer_group: str | None = None
    ) -> list[SendResult]:
        """Store messages (routing delayed and transactional ones); results in order.

        The caller has checked that this broker is the master."""
        if not messages:
            raise InvalidArgumentError("send needs at least one message")
        results: list[SendResult | None] = [None] * len(messages)
        plain: list[tuple[int, Message]] = []
        now = self._clock_ms()
        configs: dict[str, TopicConfig] = {}  # one lookup per topic, not per message
        kinds = [message_type(msg) for msg in messages]  # once per message, used twice
        self._spread_plain(messages, kinds, configs)
        for msg, kind in zip(messages, kinds, strict=True):
            config = configs.get(msg.topic)
            if config is None:
                config = configs[msg.topic] = self._config_for_send(msg.topic)
            self._prepare_for_send(msg, kind, config, now)
            check_held(msg, producer_group)
        for i, msg in enumerate(messages):  # all checked: nothing is stored for a refusal
            held = self._send_held(msg, producer_group, now)
            if held is None:
                plain.append((i, msg))
            else:
                results[i] = held
        if plain:
            stored = self.store.put_messages([m for _, m in plain])
            for (i, msg), put in zip(plain, stored, strict=True):
                results[i] = SendResult(
                    put.message_id,
                    msg.topic,
                    msg.queue_id,
                    put.queue_offset,
                    physical_offset=put.physical_offset,
                )
        # The log's end now covers this send (held messages too; at worst a little more).
        self._after_put()
        return [r for r in results if r is not None]

    def send_columns(self, batch: ColumnBatch, *, queue_id: int | None = None) -> np.ndarray:
        """Store an encoded batch of plain (NORMAL) messages of one topic; returns their
        queue offsets (the caller has checked that this broker is the master).

        What the converters of plain batches (SendMessage, SendBulk, the 4.x batch) call:
        nothing to route, so the batch goes to the store's one put as it is, the path
        :meth:`send` takes for its plain messages. Queues are chosen round robin, as
        ``send`` does for each message but in contiguous blocks (:func:`spread_in_blocks`:
        each queue gets as many as round robin gives it, its rows side by side in the
        commitlog), or all go to ``queue_id`` (a 4.x batch names its queue).
        """
        if not len(batch):
            raise InvalidArgumentError("send needs at least one message")
        if batch.topics.count(batch.topic) != len(batch):  # one topic (a C loop, no set)
            raise InvalidArgumentError("a column batch holds the messages of one topic")
        config = self._config_for_send(batch.topic)
        if not config.accepts("NORMAL"):
            raise InvalidArgumentError(
                f"topic {batch.topic} takes {config.message_type} messages, not NORMAL"
            )
        if queue_id is None:
            first = self._send_counter + 1
            self._send_counter += len(batch)
            spread_in_blocks(batch, first, config.write_queue_nums)
        elif 0 <= queue_id < config.write_queue_nums:
            batch.queue_ids = queue_id
        else:
            raise InvalidArgumentError(
                f"queue {queue_id} of topic {batch.topic} does not exist "
                f"(it has {config.write_queue_nums} write queues)"
            )
        self.store.put_batch(batch)
        self._after_put()
        return batch.queue_offsets.astype(np.int64)

    def _config_for_send(self, topic: str) -> TopicConfig:
        """The config of a topic a client sends to: never one of the broker's own
        (:func:`check_client_send`), else what :meth:`TopicManager.for_send` allows."""
        check_client_send(topic)
        return self.topics.for_send(topic)

    def _spread_plain(
        self,
        messages: Sequence[Message],
        kinds: Sequence[str],
        configs: dict[str, TopicConfig],
    ) -> None:
        """Give the messages the broker places round robin (no queue, no message group, not
        PRIORITY/LITE, which route first) their queues as :meth:`send_columns` places a
        column batch: round robin's counts per queue, in contiguous blocks per topic.

        ``kinds[i]`` is :func:`message_type` of ``messages[i]``."""
        by_topic: dict[str, list[Message]] = {}
        for msg, kind in zip(messages, kinds, strict=True):
            if (
                msg.queue_id < 0
                and not msg.properties.get(PROPERTY_MESSAGE_GROUP)
                and kind not in ("PRIORITY", "LITE")
            ):
                by_topic.setdefault(msg.topic, []).append(msg)
        for topic, placed in by_topic.items():
            config = configs.get(topic)
            if config is None:
                config = configs[topic] = self._config_for_send(topic)
            first = self._send_counter + 1
            self._send_counter += len(placed)
            if len(placed) == 1:  # a single send: no arrays to build
                placed[0].queue_id = first % config.write_queue_nums
                continue
            queues, sizes = queue_blocks(len(placed), first, config.write_queue_nums)
            for msg, queue_id in zip(placed, np.repeat(queues, sizes).tolist(), strict=True):
                msg.queue_id = queue_id

    def _prepare_for_send(self, msg: Message, kind: str, config: TopicConfig, now: int) -> None:
        """Check ``msg`` (of :func:`message_type` ``kind``) against its topic, choose its
        queue if it has none, and give it an id and a born time if it has none."""
        if not config.accepts(kind):
            raise InvalidArgumentError(
                f"topic {msg.topic} takes {config.message_type} messages, not {kind}"
            )
        if kind in ("PRIORITY", "LITE"):
            config = route(msg, kind, config)
        if msg.queue_id < 0:  # the broker chooses: by message group (FIFO), else round robin
            self._send_counter += 1
            msg.queue_id = select_write_queue(
                config.write_queue_nums,
                msg.properties.get(PROPERTY_MESSAGE_GROUP),
                self._send_counter,
            )
        if not 0 <= msg.queue_id < config.write_queue_nums:
            raise InvalidArgumentError(
                f"queue {msg.queue_id} of topic {msg.topic} does not exist "
                f"(it has {config.write_queue_nums} write queues)"
            )
        if not msg.properties.get(PROPERTY_UNIQ_KEY):
            msg.properties[PROPERTY_UNIQ_KEY] = new_message_id()
        if not msg.born_timestamp_ms:
            msg.born_timestamp_ms = now

    def _send_held(self, msg: Message, producer_group: str | None, now: int) -> SendResult | None:
        """Route a message that is not delivered at once (checked by :func:`check_held`);
        None for a plain one."""
        props = msg.properties
        msg_id = props[PROPERTY_UNIQ_KEY]
        if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            assert producer_group  # check_held
            tx_id = props.get(PROPERTY_TRANSACTION_ID) or msg_id
            prepared = self.transactions.prepare(msg, producer_group, tx_id)
            return SendResult(
                prepared.message_id,
                msg.topic,
                msg.queue_id,
                prepared.queue_offset,
                transaction_id=tx_id,
                half_offset=prepared.physical_offset,
                physical_offset=prepared.physical_offset,
            )
        level = props.get(PROPERTY_DELAY_LEVEL)
        if level:
            put = self.schedule.schedule(msg, int(level))
            return SendResult(
                msg_id,
                msg.topic,
                msg.queue_id,
                put.queue_offset,
                physical_offset=put.physical_offset,
            )
        deliver = props.get(PROPERTY_DELIVER_TIME_MS)
        if deliver:
            if int(deliver) > now:
                put = self.timer.schedule(msg, int(deliver))
                return SendResult(
                    msg_id,
                    msg.topic,
                    msg.queue_id,
                    put.queue_offset,
                    recall_handle=put.message_id,
                    physical_offset=put.physical_offset,
                )
            del props[PROPERTY_DELIVER_TIME_MS]  # already due: deliver now
        return None


# The latest delivery time a timer takes: the wheel stores it as a signed 64-bit ms count.
MAX_DELIVER_TIME_MS = 2**63 - 1


def check_held(msg: Message, producer_group: str | None) -> None:
    """InvalidArgumentError unless a held message (transactional, delay level, delivery
    time) can be routed and so will reach its topic: pure, called for every message of a
    send before any is stored."""
    props = msg.properties
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        if not producer_group:
            raise InvalidArgumentError("a transactional message needs its producer group")
        return
    level = props.get(PROPERTY_DELAY_LEVEL)
    if level:
        if not level.isdigit():
            raise InvalidArgumentError(f"delay level must be 1..18, got {level!r}")
        delay_level_ms(int(level))  # validates the range
        return
    deliver = props.get(PROPERTY_DELIVER_TIME_MS)
    if deliver and not (deliver.isdigit() and int(deliver) <= MAX_DELIVER_TIME_MS):
        raise InvalidArgumentError(
            f"delivery timestamp must be ms since the epoch, got {deliver!r}"
        )
