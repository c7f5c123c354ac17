"""Admin methods ``LockQueues`` / ``UnlockQueues``: queue locks for orderly pull consumers.

RocketMQ's ``lockBatchMQ`` / ``unlockBatchMQ`` over the admin service (see
``server/admin.py`` for the framing). Request fields: ``group``, ``client_id``,
``topic`` and ``queue_ids`` (a list of read-queue ids of the topic). ``LockQueues``
answers ``{"locked": [...]}``: the asked queues the client now holds (newly, refreshed,
or taken over from a client whose lock expired); queues another client holds live are
left out, which is not an error. ``UnlockQueues`` answers ``{"unlocked": [...]}``: the
asked queues the client held and released (queues it does not hold are left alone). An
unknown topic is TOPIC_NOT_FOUND; a queue id the topic does not have, or a malformed
field, BAD_REQUEST.

The remoting protocol's LOCK_BATCH_MQ can call :func:`lock_queues` and
:func:`unlock_queues` with the same arguments.

Threads: as every admin handler; ``QueueLockManager`` is thread-safe.
"""

from __future__ import annotations

from typing import Final

from broker_core.broker.rebalance import MessageQueue
from broker_core.errors import InvalidArgumentError
from broker_core.message import validate_group_name
from broker_core.server.context import ServerContext
from broker_core.server.json_args import Args, Verb

FIELDS: Final = frozenset({"group", "client_id", "topic", "queue_ids"})


def _queues(ctx: ServerContext, args: Args) -> tuple[str, str, list[MessageQueue]]:
    """(group, client id, queues) of a lock request; raises for anything malformed."""
    group = validate_group_name(args.text("group", required=True))
    client_id = args.text("client_id", required=True)
    if not client_id.strip():
        raise InvalidArgumentError(f"{args.method}: 'client_id' must not be empty")
    topic = args.text("topic", required=True)
    ids: object = args.data.get("queue_ids")
    if not isinstance(ids, list) or any(isinstance(q, bool) or not isinstance(q, int) for q in ids):
        raise InvalidArgumentError(f"{args.method}: 'queue_ids' must be a list of integers")
    readable = {mq.queue_id: mq for mq in ctx.broker.read_queues(topic)}
    unknown = sorted(set(ids) - set(readable))
    if unknown:
        raise InvalidArgumentError(
            f"{args.method}: topic {topic} has no read queue(s) {unknown} (it has {len(readable)})"
        )
    return group, client_id, [readable[q] for q in dict.fromkeys(ids)]


def lock_queues(ctx: ServerContext, args: Args) -> dict[str, list[int]]:
    """Lock the asked queues for the client; answers those it holds now."""
    group, client_id, queues = _queues(ctx, args)
    held = ctx.broker.consumer_groups.lock_queues(group, client_id, queues)
    return {"locked": sorted(mq.queue_id for mq in held)}


def unlock_queues(ctx: ServerContext, args: Args) -> dict[str, list[int]]:
    """Release those of the asked queues the client holds; answers them."""
    group, client_id, queues = _queues(ctx, args)
    released = ctx.broker.consumer_groups.unlock_queues(group, client_id, queues)
    return {"unlocked": sorted(mq.queue_id for mq in released)}


VERBS: Final = {
    "LockQueues": Verb(lock_queues, FIELDS),
    "UnlockQueues": Verb(unlock_queues, FIELDS),
}
