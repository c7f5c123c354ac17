"""What an administrator may do to a consumer group: the checks behind ``CreateGroup``,
and ``DeleteGroup`` (:func:`delete_group`).

As for topics (``topic_admin``): creating a group that exists with the same settings is
harmless; other settings change how a live group consumes (retries, ordering,
broadcasting, where it starts), so they need an explicit ``update``. The broker's own
groups (``CID_RMQ_SYS_*``: transaction check, delay levels, POP revive) hold its
bookkeeping offsets and are refused.
"""

from __future__ import annotations

from broker_core.broker.groups import GroupConfig, GroupManager
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.errors import ConflictError, GroupNotFoundError, InvalidGroupError

SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"


def is_system_group(name: str) -> bool:
    """True for the broker's own consumer groups (pure)."""
    return name.startswith(SYSTEM_GROUP_PREFIX)


def check_group_change(old: GroupConfig | None, new: GroupConfig, *, update: bool) -> bool:
    """Whether storing ``new`` changes anything (False: same settings, nothing to write).

    InvalidGroupError for a system group; ConflictError when ``old`` was configured
    before with other settings and ``update`` is not given (a group a consumer's first call
    created with defaults is configured freely).
    """
    if is_system_group(new.name):
        raise InvalidGroupError(
            f"{new.name!r} is one of the broker's own groups and cannot be created or changed"
        )
    if old is None or old.auto_created:  # made by a consumer's first call: configure it
        return True
    before, after = old.to_dict(), new.to_dict()
    differences = [f"{k} {before[k]} -> {after[k]}" for k in before if before[k] != after[k]]
    if differences and not update:
        raise ConflictError(
            f"consumer group {new.name!r} exists with other settings "
            f"({'; '.join(differences)}); pass update (rmq group create "
            f"--update) to change it"
        )
    return bool(differences)


def delete_group(groups: GroupManager, offsets: ConsumerOffsetManager, name: str) -> None:
    """Forget group ``name``: its config and every offset it committed (mqadmin
    deleteSubGroup). Its online consumers' subscriptions live with their heartbeats and
    go when they stop; a consumer that comes back starts the group afresh.

    InvalidGroupError for the broker's own groups; GroupNotFoundError when ``name`` has
    neither a config nor an offset."""
    if is_system_group(name):
        raise InvalidGroupError(f"{name!r} is one of the broker's own groups and cannot be deleted")
    had_offsets = name in offsets.groups()
    if not groups.delete(name) and not had_offsets:
        raise GroupNotFoundError(f"consumer group {name!r} does not exist")
    offsets.remove_group(name)
