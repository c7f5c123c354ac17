"""Checking replicated commitlog bytes before a slave stores them (``MessageStore.append_replica``).

A slave receives the master's commitlog as a byte stream cut anywhere (``broker_core.ha``).
Before anything is written it finds the longest prefix that is *whole* units, each one
verified (both CRCs, and the physical-offset field equal to the unit's global offset), plus
end-of-segment blanks that run exactly to their segment's end. The prefix never crosses a
segment boundary, so one prefix is written into one segment. What follows a prefix is
either an incomplete unit (the caller keeps it and waits for more bytes) or bytes that
break the rules (ReplicationProtocolError: the link is dropped, nothing of it is stored).
"""

from __future__ import annotations

from broker_core.errors import ReplicationProtocolError
from broker_core.protocol import unit as layout
from broker_core.store import codec
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import ConsumeQueueSet


def verified_prefix(buf: bytes, offset: int, segment_size: int) -> int:
    """Bytes at the start of ``buf`` (placed at global ``offset``) that are whole, verified
    units of one segment; 0 when the first unit is not complete yet.

    The units' frames (size, magic, segment bounds) are walked one by one; the whole
    units are then verified together by the shared vectorised verifier
    (``codec.check_units``: lengths, both CRCs, physical offsets). Raises
    ReplicationProtocolError when the *first* unit does not verify, would cross its
    segment's end, or is a blank that does not end its segment (a bad unit after good
    ones ends the prefix; the next call, starting at it, raises).
    """
    pos, size, sizes = 0, len(buf), list[int]()
    while pos + layout.MIN_BLANK_BYTES <= size:
        here = offset + pos
        if pos > 0 and here % segment_size == 0:
            break  # a segment boundary: the caller writes one segment at a time
        try:
            total, blank = _frame_at(buf, pos, here, segment_size - here % segment_size)
        except ReplicationProtocolError:
            if pos:
                break
            raise
        if pos + total > size:
            break  # not all there yet
        if not blank:  # a blank ends its segment, so the units are one run before it
            sizes.append(total)
        pos += total
    done, problem = codec.check_units(buf, 0, sizes, offset) if sizes else (0, None)
    if problem is None:
        return pos
    if done == 0:
        raise ReplicationProtocolError(f"replicated unit does not verify: {problem}")
    return sum(sizes[:done])


def _frame_at(buf: bytes, pos: int, here: int, seg_left: int) -> tuple[int, bool]:
    """(size, is a blank) of the unit or blank at ``buf[pos:]`` (global ``here``), from
    its size and magic only; ReplicationProtocolError for a frame that cannot be one."""
    total, magic = layout.SIZE_MAGIC.unpack_from(buf, pos)
    if magic == layout.BLANK_MAGIC:
        if total != seg_left:
            raise ReplicationProtocolError(
                f"blank at offset {here} covers {total} bytes, its segment has {seg_left}"
            )
        return int(total), True
    if magic != layout.MESSAGE_MAGIC or total < layout.MIN_UNIT_BYTES:
        raise ReplicationProtocolError(f"no unit at offset {here} (size {total}, magic {magic:#x})")
    if total + layout.MIN_BLANK_BYTES > seg_left:
        raise ReplicationProtocolError(
            f"unit of {total} bytes at offset {here} would cross its segment's end"
        )
    return int(total), False


def stored_bytes(commitlog: CommitLog, offset: int, size: int) -> bytes:
    """``size`` bytes of the log from ``offset`` (below its end), across segments."""
    parts: list[bytes] = []
    while size > 0:
        seg = commitlog.segment_at(offset)
        local = offset - seg.base_offset
        part = seg.read(local, min(size, seg.wrote_position - local))
        if not part:
            break
        parts.append(part)
        offset, size = offset + len(part), size - len(part)
    return b"".join(parts)


def append_replica(commitlog: CommitLog, offset: int, data: bytes) -> int:
    """Store the master's bytes ``data`` placed at ``offset``; returns how many of them are
    now in the log (the rest is an incomplete unit: send it again with what follows).

    Bytes below the log's end must equal what is stored there (a resend); anything else,
    a gap after the end, or a unit that does not verify raises ReplicationProtocolError and
    stores nothing more.
    """
    end = commitlog.max_offset
    if offset < end:
        if offset < commitlog.min_offset:
            raise ReplicationProtocolError(
                f"replicated bytes at {offset} are below this log's start {commitlog.min_offset}"
            )
        same = min(len(data), end - offset)
        if stored_bytes(commitlog, offset, same) != data[:same]:
            raise ReplicationProtocolError(
                f"replicated bytes at {offset} differ from the {same} bytes stored there"
            )
        return same + (append_replica(commitlog, end, data[same:]) if same < len(data) else 0)
    if offset > end and commitlog.segments():
        raise ReplicationProtocolError(
            f"replicated bytes at {offset} leave a gap after this log's end {end}"
        )
    done = 0
    while done < len(data):
        rest = data[done:]
        size = verified_prefix(rest, offset + done, commitlog.segment_size)
        if size == 0:
            break
        commitlog.append_raw(offset + done, rest[:size])
        done += size
    return done


def adopt_queues(queues: ConsumeQueueSet, commitlog: CommitLog) -> dict[str, int]:
    """Set each queue's next offset from its consume queue: what the replicated log holds,
    whether or not the topic table knows the topic, and even below an entry recovery made
    before a queue began again (``ConsumeQueue.restarted_by``). Returns topic -> highest
    queue id held + 1."""
    held: dict[str, int] = {}
    for cq in queues.all():
        commitlog.queue_offsets.set(cq.topic, cq.queue_id, cq.max_offset)
        held[cq.topic] = max(held.get(cq.topic, 0), cq.queue_id + 1)
    return held
