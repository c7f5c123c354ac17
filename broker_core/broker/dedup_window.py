"""The dedup window: recent message ids per topic and where their units lie (``dedup``).

Crash contract. Nothing is written: the window lives in memory and is rebuilt from the
commitlog — the only truth — by :meth:`SendWindow.rebuild` when the broker starts and
when a slave is promoted (its log holds the master's bytes at the same offsets), so a
restart or a failover answers a retry of a send stored just before it. The window is
per broker group: a retry that a client routes to another broker group is not caught.
Ids older than the window (by store time) or beyond ``dedup_max_ids`` are forgotten.

Concurrency. A send claims its keys under the window's lock before it stores: an id
being stored by another call is *in flight* (reserved in that call's small set, kept
apart from the window so a send touches the large table only twice: one lookup pass,
one insert pass) and the second call waits for it to settle (BusyError, retriable, if
it does not within :data:`PENDING_WAIT_S`), so two concurrent sends of one id store it
once. Threads: every
method may be called from any thread.

Memory: a dict of 64-bit key hashes to commitlog offsets (Python's string hash, salted
per process: the window is rebuilt in each process) plus one list of keys per
generation; about 120 bytes per id (:meth:`SendWindow.memory_bytes`, in ``/metrics``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

from broker_core.broker.sending import SendResult
from broker_core.broker.system_topics import TIMER_TOPIC, TRANS_HALF_TOPIC, is_system_topic
from broker_core.errors import BusyError, CorruptionError, RocketMQError
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)
from broker_core.protocol import unit as layout
from broker_core.protocol.group_topics import is_dlq_topic, is_retry_topic
from broker_core.protocol.property_codec import mark, value_of
from broker_core.store import codec
from broker_core.store.commitlog import CommitLog

log = logging.getLogger(__name__)

PENDING_WAIT_S = 10.0  # longest a repeat waits for the first send of its id to settle
_GENERATIONS = 16  # the count bound evicts in steps of max_ids / this
_UNIQ_MARK = mark(PROPERTY_UNIQ_KEY)


def deduplicated(topic: str) -> bool:
    """Whether sends to ``topic`` are deduplicated (not retry, DLQ or system topics)."""
    return not (is_system_topic(topic) or is_retry_topic(topic) or is_dlq_topic(topic))


def send_key(stored: StoredMessage) -> tuple[str, str] | None:
    """(topic the producer named, message id) of the send that stored ``stored``; None
    when it is not a producer's send that counts (see the module docstring)."""
    props = stored.properties
    uniq = props.get(PROPERTY_UNIQ_KEY)
    if not uniq:
        return None
    flag = stored.sys_flag & layout.SYSFLAG_TRANSACTION_MASK
    if flag == layout.SYSFLAG_TRANSACTION_COMMIT:
        return None  # a committed half's delivery: the half holds the key
    topic = stored.topic
    if is_system_topic(topic):
        if topic == TRANS_HALF_TOPIC and props.get(PROPERTY_CHECK_TIMES):
            return None  # a check-back's copy of a half
        topic = props.get(PROPERTY_REAL_TOPIC, "")
    return (topic, uniq) if topic and deduplicated(topic) else None


def original_result(stored: StoredMessage) -> SendResult:
    """The answer the producer got when ``stored`` was first sent."""
    props = stored.properties
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    if not is_system_topic(stored.topic) or not real_topic:
        return SendResult(
            stored.message_id,
            stored.topic,
            stored.queue_id,
            stored.queue_offset,
            physical_offset=stored.physical_offset,
        )
    half = stored.topic == TRANS_HALF_TOPIC
    return SendResult(
        stored.message_id,
        real_topic,
        int(props.get(PROPERTY_REAL_QUEUE_ID) or 0),
        stored.queue_offset,
        transaction_id=props.get(PROPERTY_TRANSACTION_ID, "") if half else "",
        recall_handle=stored.message_id if stored.topic == TIMER_TOPIC else "",
        half_offset=stored.physical_offset if half else -1,
        physical_offset=stored.physical_offset,
    )


def _key(topic: str, uniq: str) -> int:
    return hash(uniq) ^ hash(topic)


@dataclass(slots=True)
class Claim:
    """What :meth:`SendWindow.claim` found for each row of a send.

    ``rows[i]`` is None for a row to store (its key reserved, or no key), else the
    commitlog offset of the original unit (>= 0), or ``-2 - j`` when row ``j`` of the
    same send is its first occurrence. ``keys[i]`` is the row's key (None: not counted).
    """

    keys: list[int | None]
    rows: list[int | None]
    fresh: bool  # every row is to be stored (the usual case)
    token: int = 0  # its reservation in the window (``_inflight``)


class SendWindow:
    """The recent message ids per topic and where their units lie (module docstring)."""

    def __init__(
        self,
        *,
        window_ms: int,
        max_ids: int,
        read_unit: Callable[[int], StoredMessage],
        clock_ms: Callable[[], int],
    ) -> None:
        self.window_ms = window_ms
        self.max_ids = max_ids
        self._read_unit = read_unit
        self._clock_ms = clock_ms
        self._ids: dict[int, int] = {}  # key -> commitlog offset
        # the keys each send being stored reserved (a repeat of one waits): few, small
        self._inflight: dict[int, dict[int | None, None]] = {}
        self._tokens = 0
        self._generations: deque[tuple[int, list[int]]] = deque()  # (newest ms, keys)
        self._current: list[int] = []
        self._current_first_ms = self._current_newest_ms = 0
        self._held = 0  # keys in sealed generations
        self._lock = threading.Condition()
        self._waiters = 0
        self.repeats = 0  # sends answered from the window since start

    @property
    def enabled(self) -> bool:
        return self.window_ms > 0 and self.max_ids > 0

    def keys(self, topics: Sequence[str], ids: Sequence[str | None]) -> list[int | None]:
        """Each row's key: None where the topic is not deduplicated or there is no id."""
        salts: dict[str, int | None] = {}
        keys: list[int | None] = []
        for topic, uniq in zip(topics, ids, strict=True):
            if topic not in salts:
                salts[topic] = hash(topic) if deduplicated(topic) else None
            salt = salts[topic]
            keys.append(None if salt is None or not uniq else hash(uniq) ^ salt)
        return keys

    def column_keys(self, topic: str, index_keys: list[list[str]]) -> list[int | None] | None:
        """:meth:`keys` of a one-topic batch whose every row's first index key is its id
        (a column batch's); None when the topic is not deduplicated. The ids are hashed
        in C (``map``), the topic mixed in by one comprehension."""
        if not deduplicated(topic):
            return None
        salt = hash(topic)
        return [h ^ salt for h in map(hash, map(itemgetter(0), index_keys))]

    # ---- the send path ------------------------------------------------------------------

    def claim(self, keys: list[int | None]) -> Claim:
        """Find each row's original (a repeat) or reserve its key (to be stored)."""
        deadline = time.monotonic() + PENDING_WAIT_S
        with self._lock:
            while True:
                claim = self._claim_locked(keys)
                if claim is not None:
                    return claim
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BusyError("a send of the same message id is still being stored")
                self._waiters += 1
                try:
                    self._lock.wait(remaining)
                finally:
                    self._waiters -= 1

    def _claim_locked(self, keys: list[int | None]) -> Claim | None:
        ids, inflight = self._ids, self._inflight
        reserved = dict.fromkeys(keys)  # also tells whether a key repeats in the send
        if (
            len(reserved) == len(keys)
            and None not in reserved
            and ids.keys().isdisjoint(reserved)
            and all(other.keys().isdisjoint(reserved) for other in inflight.values())
        ):
            return self._reserve_locked(Claim(keys, [None] * len(keys), True), reserved)
        rows: list[int | None] = []
        first: dict[int, int] = {}
        for row, key in enumerate(keys):
            if key is None:
                rows.append(None)
            elif key in first:
                rows.append(-2 - first[key])
            elif any(key in other for other in inflight.values()):
                return None  # another send is storing it: wait for it
            else:
                rows.append(ids.get(key))
                first[key] = row
        mine: dict[int | None, None] = {
            k: None for k, r in zip(keys, rows, strict=True) if k is not None and r is None
        }
        return self._reserve_locked(Claim(keys, rows, False), mine)

    def _reserve_locked(self, claim: Claim, keys: dict[int | None, None]) -> Claim:
        self._tokens += 1
        claim.token = self._tokens
        self._inflight[claim.token] = keys
        return claim

    def _release_locked(self, claim: Claim) -> None:
        self._inflight.pop(claim.token, None)
        if self._waiters:
            self._lock.notify_all()

    def settle(self, claim: Claim, offsets: Sequence[int]) -> None:
        """The reserved rows were stored at ``offsets`` (one per row to store, in order)."""
        if claim.fresh:  # every key set (none None), one per offset
            keys: list[int] = claim.keys  # type: ignore[assignment]
            with self._lock:
                self._ids.update(zip(keys, offsets, strict=True))
                self._add_locked(keys, self._clock_ms())
                self._release_locked(claim)
            return
        stored_keys = [k for k, r in zip(claim.keys, claim.rows, strict=True) if r is None]
        pairs = [(k, o) for k, o in zip(stored_keys, offsets, strict=True) if k is not None]
        with self._lock:
            self._ids.update(pairs)
            self._add_locked([k for k, _ in pairs], self._clock_ms())
            self._release_locked(claim)

    def abandon(self, claim: Claim) -> None:
        """The send failed: its reservations are dropped (a retry stores it)."""
        with self._lock:
            self._release_locked(claim)

    def original(self, key: int, offset: int, topic: str, uniq: str) -> SendResult | None:
        """The first send's result, read from its unit; None when that unit is gone or
        is not a send of (``topic``, ``uniq``) (a hash collision)."""
        try:
            stored = self._read_unit(offset)
        except RocketMQError:
            return None
        if send_key(stored) != (topic, uniq):
            return None
        return original_result(stored)

    # ---- bounds and rebuild ---------------------------------------------------------------

    def _add_locked(self, keys: list[int], now_ms: int) -> None:
        """File stored keys in the current generation (sealing it when full or aged),
        then drop the generations beyond the bounds."""
        step = max(1, self.max_ids // _GENERATIONS)
        for at in range(0, len(keys), step):
            current = self._current
            if current and (
                len(current) >= step
                or now_ms - self._current_first_ms >= self.window_ms // _GENERATIONS
            ):
                self._generations.append((self._current_newest_ms, current))
                self._held += len(current)
                self._current = current = []
            if not current:
                self._current_first_ms = now_ms
            current.extend(keys if len(keys) <= step else keys[at : at + step])
            self._current_newest_ms = now_ms
            self._evict_locked(now_ms)

    def _evict_locked(self, now_ms: int) -> None:
        gens, ids = self._generations, self._ids
        while gens and (
            self._held + len(self._current) > self.max_ids or gens[0][0] < now_ms - self.window_ms
        ):
            _newest, old = gens.popleft()
            self._held -= len(old)
            deque(map(ids.pop, old, repeat(None)), maxlen=0)  # pops in C, not a Python loop

    def rebuild(self, commitlog: CommitLog) -> int:
        """Refill the window from the units stored within it (at start and promotion);
        returns how many sends it now holds."""
        now = self._clock_ms()
        with self._lock:
            self._ids.clear()
            self._generations.clear()
            self._current, self._current_first_ms, self._held = [], 0, 0
            if not self.enabled:
                return 0
            start = _window_start(commitlog, now - self.window_ms)
            for buf, pos, phys in _readable_units(commitlog, start, commitlog.max_offset):
                found = _unit_send(buf, pos, now - self.window_ms)
                if found is None:
                    continue
                key, store_ms = found
                if key not in self._ids:
                    self._ids[key] = phys
                    self._add_locked([key], store_ms)
            self._evict_locked(now)
            return len(self._ids)

    def size(self) -> int:
        """Message ids held now."""
        return len(self._ids)

    def memory_bytes(self) -> int:
        """An estimate of the window's memory: the dict, its int objects, the key lists."""
        with self._lock:
            lists = sum(sys.getsizeof(keys) for _, keys in self._generations)
            lists += sys.getsizeof(self._current)
            return sys.getsizeof(self._ids) + 64 * len(self._ids) + lists


def _readable_units(commitlog: CommitLog, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """``commitlog.iter_units`` that steps over a corrupt region to the next segment
    instead of failing the broker's start: a damaged unit is refused when read (its id
    cannot repeat a send the client saw answered), and the rest of the window is kept."""
    offset = start
    while offset < end:
        progress = [offset]
        try:
            yield from commitlog.iter_units(offset, end, progress=progress)
            return
        except CorruptionError as exc:
            later = [s.base_offset for s in commitlog.segments() if s.base_offset > progress[0]]
            log.warning("dedup window: skipped the rest of a segment at %d: %s", progress[0], exc)
            offset = min(later, default=end)


def _window_start(commitlog: CommitLog, since_ms: int) -> int:
    """The base of the newest segment whose first unit is older than ``since_ms`` (the
    window starts in it), else the log's start."""
    for seg in reversed(commitlog.segments()):
        written = seg.wrote_position >= layout.HEADER_SIZE
        if written and commitlog.read_store_timestamp(seg.base_offset) < since_ms:
            return seg.base_offset
    return commitlog.min_offset


def _unit_send(buf: bytes, pos: int, since_ms: int) -> tuple[int, int] | None:
    """(key, store time) of the send that stored the unit at ``pos``, if it counts and
    was stored at or after ``since_ms``. Reads only the header and the tail; decodes the
    properties only of units in system topics (holds of sends, rare)."""
    head = layout.HEADER.unpack_from(buf, pos)
    store_ms = head[12]
    if store_ms < since_ms:
        return None
    p = pos + layout.HEADER_SIZE + head[18]
    topic = bytes(buf[p + 1 : p + 1 + buf[p]]).decode()
    p += 1 + buf[p]
    props = bytes(buf[p + 2 : p + 2 + layout.PROPS_LEN.unpack_from(buf, p)[0]])
    if is_system_topic(topic) or head[8] & layout.SYSFLAG_TRANSACTION_MASK:
        stored = codec.decode(buf, pos)
        found = send_key(stored)
        return None if found is None else (_key(*found), store_ms)
    if not deduplicated(topic):
        return None
    uniq = value_of(props, _UNIQ_MARK)
    return (_key(topic, uniq), store_ms) if uniq else None
