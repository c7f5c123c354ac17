"""The broker's offset pulls: what the front ends call for a pull consumer's read.

:class:`Pulling` checks a pull (the group exists or may be created, the topic is readable,
the queue exists), caps its batch at the broker's limit, and answers it from the
:class:`~broker_core.broker.pull.PullService` at once or from the
:class:`~broker_core.broker.long_polling.LongPollingService` when it waits for messages;
the trace recorder sees every answer. The broker builds one and holds it as
``broker.pulling``; it needs nothing else of the broker.

Threads: stateless over thread-safe services; callable from any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker_core.broker.groups import GroupManager
from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.pull import PullRequest, PullResult, PullService
from broker_core.broker.topics import TopicManager
from broker_core.broker.trace.recorder import TraceRecorder
from broker_core.clock import monotonic_ms
from broker_core.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class PullLimits:
    """How much one pull may take and wait.

    ``max_wait_ms`` is read at each pull: the administrator may change
    ``max_long_polling_ms`` while the broker runs (``live_config``)."""

    max_count: int  # decoded messages per pull (``max_pull_batch``)
    max_raw_count: int  # stored units per raw pull (``max_raw_pull_batch``)
    max_wait_ms: Callable[[], int]


class Pulling:
    """Checked, capped, traced offset pulls (see the module docstring)."""

    def __init__(
        self,
        groups: GroupManager,
        topics: TopicManager,
        pulls: PullService,
        long_polling: LongPollingService,
        trace: TraceRecorder,
        limits: PullLimits,
    ) -> None:
        self._groups, self._topics, self._trace = groups, topics, trace
        self._pulls, self._long_polling, self._limits = pulls, long_polling, limits

    def pull(self, group: str, request: PullRequest, *, timeout_ms: int = 0) -> PullResult:
        """Offset-based pull for ``group``; with ``timeout_ms`` it long-polls for new messages.

        ``request.raw`` pulls hand out the stored units (``PullResult.raw``), at most
        ``max_raw_pull_batch``; decoded ones ``max_pull_batch``. Raises for an unknown
        group or topic, an unreadable topic, or a queue the topic does not have."""
        request = self._checked(group, request)
        wait_ms = min(timeout_ms, self._limits.max_wait_ms())
        if timeout_ms <= 0:
            result = self._pulls.execute(request)
        else:
            result = self._long_polling.pull_blocking(request, timeout_ms=wait_ms)
        self._trace.pulled(group, request, result)
        return result

    def pull_async(
        self,
        group: str,
        request: PullRequest,
        callback: Callable[[PullResult], None],
        *,
        timeout_ms: int = 0,
    ) -> None:
        """:meth:`pull` for event-driven servers: ``callback(result)`` runs once, at once on
        this thread when there is something (or ``timeout_ms`` is 0), else on the long-polling
        thread when messages arrive or the wait ends. Bad arguments raise here."""
        request = self._checked(group, request)
        wait_ms = min(max(timeout_ms, 0), self._limits.max_wait_ms())
        callback = self._trace.watch_pull(group, request, callback)
        self._long_polling.pull_or_park(request, monotonic_ms() + wait_ms, callback)

    def _checked(self, group: str, request: PullRequest) -> PullRequest:
        """``request`` capped at the broker's batch limit, once group, topic and queue pass."""
        self._groups.get_or_create(group)
        config = self._topics.for_read(request.topic)
        if not 0 <= request.queue_id < config.read_queue_nums:
            raise InvalidArgumentError(
                f"queue {request.queue_id} of topic {request.topic} does not exist"
            )
        cap = self._limits.max_raw_count if request.raw else self._limits.max_count
        return request.capped(cap)
