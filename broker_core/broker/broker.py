"""The broker: every policy service over one message store, composed in one object.

It knows nothing of sockets. It owns the store, the metadata managers (topics, groups,
consumer offsets, live clients) and the services (pull and long polling, POP, delay
levels, timers, transactions, queue locks, trace), starts them in dependency order and
stops them in reverse. What the front ends call lives in four objects it builds, each
over only the parts it needs:

=========================  ===============================================================
``broker.sending``         :class:`~.send_calls.Sending`: sends (routed by ``sending.py``,
                           deduplicated by ``dedup.py``), transaction ends, recalls
``broker.pulling``         :class:`~.pulling.Pulling`: offset pulls and their long polling
``broker.consuming``       :class:`~.consuming.Consuming`: POP receive, ack, invisibility,
                           dead-lettering, resend
``broker.consumer_groups`` :class:`~.consumer_groups.ConsumerGroups`: committed offsets,
                           resets, progress, heartbeats, assignment, queue locks
=========================  ===============================================================

The broker itself keeps the lifecycle, its role (:meth:`Broker.require_master`), topic
and group administration, and queries.

Threads: every public method may be called from any thread.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from broker_core.broker.clients import ClientRegistry
from broker_core.broker.consumer_groups import ConsumerGroups
from broker_core.broker.consuming import Consuming
from broker_core.broker.dedup import with_dedup
from broker_core.broker.group_positions import GroupPositions
from broker_core.broker.groups import BROADCAST_MARK, GroupConfig, GroupManager, base_group
from broker_core.broker.lite import (
    LiteSubscriptions,
)
from broker_core.broker.locks import QueueLockManager
from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pop.model import PopConfig
from broker_core.broker.pop.pop import PopService
from broker_core.broker.pull import PullService
from broker_core.broker.pulling import Pulling, PullLimits
from broker_core.broker.put_rate import PutRate, stored_total
from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.send_calls import Sending
from broker_core.broker.sending import Sender
from broker_core.broker.system_topics import destination_topic
from broker_core.broker.timer.schedule import ScheduleService
from broker_core.broker.timer.timer import TimerService
from broker_core.broker.topic_admin import TopicChange, plan_change
from broker_core.broker.topic_waiter import TopicWaiter
from broker_core.broker.topics import TopicConfig, TopicManager
from broker_core.broker.trace.recorder import TraceRecorder
from broker_core.broker.transaction.halves import read_named
from broker_core.broker.transaction.transaction import (
    CheckRequest,
    TransactionService,
)
from broker_core.clock import now_ms
from broker_core.config import BrokerConfig, Role, StoreConfig
from broker_core.errors import MessageNotFoundError, TopicNotFoundError
from broker_core.ha.group import Replication
from broker_core.ha.metadata import ConfigTables
from broker_core.message import (
    StoredMessage,
)
from broker_core.service_thread import ServiceThread
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from broker_core.store.recovery import RecoveryReport

log = logging.getLogger(__name__)

Checker = Callable[[CheckRequest], None]


class Broker:
    """One broker: store, metadata and services (see the module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        store_config: StoreConfig,
        *,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self._clock_ms = clock_ms
        self.store = MessageStore(store_config, clock_ms)
        self.store.acquire_lock()  # before any file under the store is read or written
        try:
            self._build(config, store_config, clock_ms)
        except BaseException:
            self.store.close()  # unlocks: a broker that failed to build holds nothing
            raise

    def _build(
        self, config: BrokerConfig, store_config: StoreConfig, clock_ms: Callable[[], int]
    ) -> None:
        cfg_dir = store_config.config_dir
        self.topics = TopicManager(
            cfg_dir / "topics.json",
            auto_create=config.auto_create_topics,
            default_queue_nums=config.default_queue_nums,
        )
        self.groups = GroupManager(
            cfg_dir / "subscriptionGroup.json", auto_create=config.auto_create_groups
        )
        self.offsets = ConsumerOffsetManager(cfg_dir / "consumerOffset.json")
        for table in (self.topics, self.groups, self.offsets):
            if table.load_problem:  # read from the .bak copy, or a stale setting replaced
                log.warning("config table loaded with a problem: %s", table.load_problem)
        self.clients = ClientRegistry(expiry_ms=config.client_expiry_ms)
        self.positions = GroupPositions(self.groups, self.offsets, self.clients, self.store)
        self.locks = QueueLockManager(expiry_ms=config.queue_lock_expiry_ms)
        self.put_rate = PutRate(lambda: stored_total(self.store.dispatcher.snapshot))
        self.pulls = PullService(self.store)
        self.long_polling = LongPollingService(self.store, self.pulls)
        self.waiter = TopicWaiter()
        self.lite = LiteSubscriptions()
        self.schedule = ScheduleService(self.store, cfg_dir / "delayOffset.json", clock_ms)
        self.timer = TimerService(
            self.store,
            cfg_dir.parent / "timerwheel",
            precision_ms=config.timer_precision_ms,
            clock_ms=clock_ms,
        )
        self._checker: Checker | None = None
        self.transactions = TransactionService(
            self.store,
            self.offsets,
            self._check_back,
            check_timeout_ms=config.transaction_check_timeout_ms,
            max_check_times=config.transaction_max_checks,
            check_interval_ms=config.transaction_check_interval_ms,
            clock_ms=clock_ms,
        )
        self.pop = PopService(
            self.store,
            self.offsets,
            PopConfig(
                broker_name=config.broker_name, revive_interval_ms=config.pop_revive_interval_ms
            ),
            clock_ms=clock_ms,
            retry_policy_for=lambda g: self.group(base_group(g)).retry_policy,
            is_fifo=lambda g: BROADCAST_MARK in g or self.group(g).fifo,  # members: in place
            initial_offset=self.positions.pop_initial_offset,
            group_of=base_group,
        )
        tables = ConfigTables(cfg_dir, self.topics, self.groups, self.offsets)  # what HA copies
        self.replication = Replication(config, self.store, tables)
        self.trace = TraceRecorder(self.store, self.topics, config, clock_ms)
        self.timer.fired = self.schedule.fired = self.trace.fired
        # Persists offsets and purges expired locks; a failed round is logged and retried.
        self._housekeeper = ServiceThread(
            "broker-housekeeping", self._housekeep, interval_ms=config.offsets_persist_interval_ms
        )
        self.recovery: RecoveryReport | None = None
        sender = Sender(
            self.store,
            self.topics,
            self.transactions,
            self.schedule,
            self.timer,
            clock_ms=clock_ms,
            after_put=self._wait_replicated,
        )
        # Repeats of recent message ids are answered, not stored again (``dedup``).
        self.sender = with_dedup(
            sender, config, self.store.commitlog.read_message, clock_ms, self.topics
        )
        self._build_calls(config, clock_ms)
        self._rebalance_listeners: list[Callable[[str], None]] = []
        self.clients.add_listener(self._on_membership_change)

    def _build_calls(self, config: BrokerConfig, clock_ms: Callable[[], int]) -> None:
        """The objects the front ends call, each over the parts it needs."""
        self.sending = Sending(
            self.sender,
            self.transactions,
            self.timer,
            self.trace,
            require_master=self.require_master,
            wait_replicated=self._wait_replicated,
        )
        self.pulling = Pulling(
            self.groups,
            self.topics,
            self.pulls,
            self.long_polling,
            self.trace,
            PullLimits(config.max_pull_batch, config.max_raw_pull_batch, self._max_wait_ms),
        )
        self.consuming = Consuming(
            self.pop,
            self.groups,
            self.topics,
            self.positions,
            self.lite,
            self.waiter,
            self.trace,
            clock_ms=clock_ms,
            max_wait_ms=self._max_wait_ms,
            require_master=self.require_master,
            find=self.query_by_id,
            send=self.sending.send,
        )
        self.consumer_groups = ConsumerGroups(
            self.groups,
            self.topics,
            self.offsets,
            self.positions,
            self.clients,
            self.locks,
            self.pop,
            self.store,
            broker_name=config.broker_name,
        )

    def _max_wait_ms(self) -> int:
        """The long-polling cap now (``max_long_polling_ms`` changes live)."""
        return self.config.max_long_polling_ms

    def _wait_replicated(self) -> None:
        self.replication.wait_replicated(self.store.commitlog.max_offset)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> RecoveryReport:
        """Open the store (recovering it), then start every service."""
        self.recovery = self.store.open()
        self.put_rate.sample()  # the base of the first put TPS figure
        self.topics.ensure_system_topics()
        self.store.add_dispatch_listener(self.waiter.notify)
        self.replication.start()
        if self.replication.role is Role.SLAVE:  # its log holds only the master's bytes
            services: tuple[Any, ...] = (self.long_polling, self.clients)
        else:
            self.sender.window.rebuild(self.store.commitlog)
            self.pop.open()
            self.transactions.open()  # reads the half/op topics: only after the store opens
            services = (
                self.long_polling,
                self.schedule,
                self.timer,
                self.transactions,
                self.pop,
                self.clients,
                self.trace,
            )
        for service in services:
            service.start()
        self._housekeeper.start()
        return self.recovery

    def promote(self) -> None:
        """Controller mode: a running slave becomes the master (``Replication.promote``)
        and starts the services only a master runs, as ``start`` would have."""
        self.config = dataclasses.replace(self.config, broker_id=0, ha_master="")
        self.replication.promote()
        self.sender.window.rebuild(self.store.commitlog)
        self.pop.open()
        self.transactions.open()
        for service in (self.schedule, self.timer, self.transactions, self.pop, self.trace):
            service.start()

    def resize_dedup_window(self, window_ms: int) -> None:
        """The dedup window's new length, live (``live_config``): rebuilt from the log
        now on a master; a slave's is rebuilt when it is promoted."""
        window = self.sender.window
        window.window_ms = window_ms
        if self.replication.role is not Role.SLAVE:
            window.rebuild(self.store.commitlog)

    def stop(self) -> None:
        """Stop services (answering parked requests), persist offsets, close the store."""
        self._housekeeper.stop()
        self.waiter.close()
        self.replication.stop()
        for service in (
            self.trace,
            self.clients,
            self.transactions,
            self.timer,
            self.schedule,
            self.long_polling,
        ):
            service.stop()
        self.pop.close()
        self.timer.close()
        self.schedule.close()
        try:
            self.offsets.persist()
        finally:  # a failed offsets write must not leave the store unflushed
            self.store.close()

    def service_threads(self) -> list[ServiceThread]:
        """Every background thread of the broker and its store, started or not."""
        return [
            *self.store.service_threads(),
            self.long_polling.thread,
            self.schedule.thread,
            self.timer.thread,
            self.transactions.thread,
            self.pop.thread,
            self.clients.thread,
            *self.trace.threads(),
            self._housekeeper,
            *self.replication.threads(),
        ]

    def service_health(self) -> dict[str, str]:
        """Each background thread by name: its ``ServiceThread.state()``.

        ``"ok"`` (running), ``"stopped"`` (not started: a slave runs no schedule, timer,
        transaction or POP thread), ``"failed: <error>"`` (the thread died of it) or
        ``"error: <error>"`` (its last round failed; it retries).
        """
        return {thread.name: thread.state() for thread in self.service_threads()}

    def _housekeep(self) -> None:
        try:
            self.offsets.persist()
        finally:
            self.locks.purge_expired()  # locks of clients that stopped refreshing
            self.put_rate.sample()

    def set_transaction_checker(self, checker: Checker | None) -> None:
        """Who asks producers about unresolved transactions (the server's Telemetry)."""
        self._checker = checker

    @property
    def transaction_checker(self) -> Checker | None:
        """The checker now set (a second front end chains to it)."""
        return self._checker

    def _check_back(self, request: CheckRequest) -> None:
        if self._checker is None:
            log.info("no producer reachable to check transaction %s", request.transaction_id)
            return
        self._checker(request)

    # ---- metadata -----------------------------------------------------------------------

    def add_rebalance_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(group)`` runs when a group's members or its topics' queues change."""
        self._rebalance_listeners.append(listener)

    def _on_membership_change(self, group: str) -> None:
        for listener in list(self._rebalance_listeners):
            try:
                listener(group)
            except Exception:
                log.exception("rebalance listener failed for group %s", group)

    def update_topic(self, config: TopicConfig) -> TopicConfig:
        """Create or change a topic; groups consuming it are told to rebalance."""
        old = self.topics.get(config.name)
        new = self.topics.create_or_update(config)
        if old is not None and old.read_queue_nums != new.read_queue_nums:
            for group in self.clients.groups_of_topic(config.name):
                self._on_membership_change(group)
        return new

    def administer_topic(
        self, config: TopicConfig, *, update: bool = False, force: bool = False
    ) -> TopicChange:
        """An administrator's create or change of a topic, under ``topic_admin``'s rules
        (InvalidTopicError for names the broker owns, ConflictError without update/force)."""

        def stored(queue_id: int) -> int:
            topic = config.name
            return self.store.max_offset(topic, queue_id) - self.store.min_offset(topic, queue_id)

        change = plan_change(
            self.topics.get(config.name),
            config,
            update=update,
            force=force,
            messages_in_queue=stored,
        )
        if change.changed:
            self.update_topic(change.config)
        for warning in change.warnings:
            log.warning("%s", warning)
        return change

    def group(self, name: str) -> GroupConfig:
        return self.groups.get_or_create(name)

    def configure_group(self, config: GroupConfig) -> GroupConfig:
        """Store a group's settings (admin) and make sure its retry topic exists, so clients
        that read routes only now and then (4.x clients: every 30 s) find it before their
        first retry."""
        stored = self.groups.create_or_update(config)
        self.topics.ensure_retry_topic(config.name)
        return stored

    def topic_for_read(self, topic: str) -> TopicConfig:
        return self.topics.for_read(topic)

    def read_queues(self, topic: str) -> list[MessageQueue]:
        return self.topics.for_read(topic).read_queues(self.config.broker_name)

    # ---- roles and messages by commitlog offset -----------------------------------------

    def require_master(self) -> None:
        """NotMasterError on a slave (before anything is created or written)."""
        self.replication.require_master()

    def topic_at(self, physical_offset: int) -> str:
        """The topic of the message a client names by commitlog offset (a 4.x
        CONSUMER_SEND_MSG_BACK's ``offset``: what the ACL checks). MessageNotFoundError
        when no verified message starts there; reads at most one unit's largest size."""
        stored = read_named(self.store, physical_offset)
        if stored is None:
            raise MessageNotFoundError(f"no message at commitlog offset {physical_offset}")
        return stored.topic

    def half_topic(self, physical_offset: int, message_id: str) -> str:
        """The real topic of the unresolved half ``message_id`` named by the half record at
        commitlog ``physical_offset`` (a 4.x END_TRANSACTION's ``commitLogOffset``): what
        ending it needs Pub on. MessageNotFoundError for an unknown id or an offset that
        holds no half record of it (``TransactionService.half_topic``)."""
        return self.transactions.half_topic(physical_offset, message_id)

    def message_at(self, physical_offset: int) -> StoredMessage:
        """The stored message at a commitlog offset (4.x clients name messages so)."""
        return self.store.commitlog.read_message(physical_offset)

    # ---- queries ------------------------------------------------------------------------------

    def query_by_id(self, message_id: str, topic: str | None = None) -> StoredMessage:
        return self.store.query_by_id(message_id, topic, topic_of=destination_topic)

    def query_by_key(
        self, topic: str, key: str, *, max_results: int = 64, begin_ms: int = 0, end_ms: int = 2**62
    ) -> list[StoredMessage]:
        return self.store.query_by_key(
            key,
            topic=topic,
            max_results=max_results,
            begin_ms=begin_ms,
            end_ms=end_ms,
            topic_of=destination_topic,
        )

    def query_by_time(
        self, topic: str, begin_ms: int, end_ms: int, max_results: int = 64
    ) -> list[StoredMessage]:
        """Messages of ``topic`` stored in ``[begin_ms, end_ms)``, oldest first per queue."""
        found: list[StoredMessage] = []
        for mq in self.read_queues(topic):
            offset = self.store.offset_for_timestamp(topic, mq.queue_id, begin_ms)
            got = self.store.get_messages(QueueRead(topic, mq.queue_id, offset, max_results))
            found.extend(m for m in got.messages if m.store_timestamp_ms < end_ms)
        found.sort(key=lambda m: (m.store_timestamp_ms, m.queue_id, m.queue_offset))
        return found[:max_results]

    # ---- administration -------------------------------------------------------------------------

    @property
    def store_config(self) -> StoreConfig:
        """The store's settings (the front ends check its message limits before a send)."""
        return self.store.config

    def commitlog_offsets(self) -> tuple[int, int, int]:
        """(min, max, flushed) physical offset of the commitlog, for health reports."""
        commitlog = self.store.commitlog
        return commitlog.min_offset, commitlog.max_offset, commitlog.flushed_offset

    def delete_topic(self, topic: str) -> None:
        """Forget a topic: its config, its queues and the offsets committed in it (its
        messages' bytes age out with retention). TopicNotFoundError when it does not exist."""
        if not self.topics.delete(topic):
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        self.store.delete_topic(topic)
        self.offsets.remove_topic(topic)

    def topic_status(self, topic: str) -> list[tuple[int, int, int]]:
        """(queue id, min offset, max offset) of every read queue."""
        store, ids = self.store, [mq.queue_id for mq in self.read_queues(topic)]
        return [(qid, store.min_offset(topic, qid), store.max_offset(topic, qid)) for qid in ids]
