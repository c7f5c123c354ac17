"""The rules of a pull's arguments, whichever way it comes in: checked in one place.

PullMessage, PullRaw and the 4.x PULL_MESSAGE all build the broker's ``PullRequest``,
whose construction calls :func:`check_pull_args`; the front ends only parse their wire's
fields. What needs the broker's state (the group, the topic, its number of queues, the
batch cap) the broker checks when it runs the pull.

==============  ===========================  ==================================
argument        rule                         error (wire status)
==============  ===========================  ==================================
offset          ≥ 0                          InvalidOffsetError (ILLEGAL_OFFSET)
queue id        ≥ 0                          InvalidArgumentError (BAD_REQUEST)
max count       ≥ 1                          InvalidArgumentError (BAD_REQUEST)
max bytes       ≥ 1                          InvalidArgumentError (BAD_REQUEST)
==============  ===========================  ==================================

>>> check_pull_args("t", 0, 5, 32, 1024)
>>> check_pull_args("t", 0, -1, 32, 1024)
Traceback (most recent call last):
...
broker_core.errors.InvalidOffsetError: bad pull of t:0: offset -1 must be >= 0
"""

from __future__ import annotations

from broker_core.errors import InvalidArgumentError, InvalidOffsetError


def check_pull_args(topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int) -> None:
    """Raise for arguments no queue could answer (see the module docstring)."""
    if offset < 0:
        raise InvalidOffsetError(f"bad pull of {topic}:{queue_id}: offset {offset} must be >= 0")
    if queue_id < 0:
        raise InvalidArgumentError(f"bad pull of {topic}: queue id {queue_id} must be >= 0")
    if max_count < 1:
        raise InvalidArgumentError(
            f"bad pull of {topic}:{queue_id}: max count {max_count} must be >= 1"
        )
    if max_bytes < 1:
        raise InvalidArgumentError(
            f"bad pull of {topic}:{queue_id}: max bytes {max_bytes} must be >= 1"
        )
