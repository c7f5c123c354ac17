"""RocketMQ's permission bits (``PermName``): what a topic, or a broker group's share of it
in a route, lets clients do. The one definition: the broker's topic table, the NameServer's
routes, the client's routing and the connector all test these.

====  ==========  ===============================================
bit   name        meaning
====  ==========  ===============================================
2     WRITE       producers may send to the queues
4     READ        consumers may read the queues
6     READ_WRITE  both (the default of a new topic)
====  ==========  ===============================================

(RocketMQ's bit 1, ``PERM_INHERIT``, is not used here.)
"""

from __future__ import annotations

from typing import Final


class Perm:
    """RocketMQ's permission bits; a topic's ``perm`` is WRITE, READ or READ_WRITE."""

    WRITE: Final = 2
    READ: Final = 4
    READ_WRITE: Final = 6
    VALID: Final = frozenset({2, 4, 6})

    @staticmethod
    def readable(perm: int) -> bool:
        """True if ``perm`` lets consumers read."""
        return bool(perm & Perm.READ)

    @staticmethod
    def writeable(perm: int) -> bool:
        """True if ``perm`` lets producers write."""
        return bool(perm & Perm.WRITE)

    @staticmethod
    def describe(perm: int) -> str:
        """RocketMQ's ``RW-`` style rendering (``"R--"``, ``"-W-"``, ``"RW-"``)."""
        return ("R" if Perm.readable(perm) else "-") + ("W" if Perm.writeable(perm) else "-") + "-"
