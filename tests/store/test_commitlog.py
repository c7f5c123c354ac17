"""CommitLog: segments, roll-over, and recovery tested the way Kafka tests LogSegment."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from broker_core.errors import CorruptionError, OffsetOutOfRangeError
from broker_core.protocol import unit as layout
from broker_core.store.columns import encode_messages
from broker_core.store.commitlog import CommitLog
from tests.store.conftest import make_message

SEGMENT = 16 * 1024
HOST = ("127.0.0.1", 8081)
LIMITS = dict(max_body_bytes=4096, max_properties_bytes=1024)


def fill(directory: Path, count: int, seed: int = 1) -> list[tuple[int, int, bytes]]:
    """Append ``count`` messages of varied sizes; returns (offset, size, body) of each."""
    rng = random.Random(seed)
    log = CommitLog(directory, SEGMENT, HOST)
    log.load()
    log.recover(0)
    written = []
    for i in range(count):
        msg = make_message(i, queue_id=i % 3, size=rng.randint(1, 3000))
        batch = encode_messages([msg], **LIMITS)
        log.append(batch, 1_000 + i)
        written.append((int(batch.head["physical_offset"][0]), int(batch.sizes[0]), msg.body))
    log.close()
    return written


def reopen(directory: Path, from_offset: int = 0) -> tuple[CommitLog, int]:
    log = CommitLog(directory, SEGMENT, HOST)
    log.load()
    return log, log.recover(from_offset).end_offset


def test_units_never_span_segments_and_files_are_named_by_offset(tmp_path: Path) -> None:
    written = fill(tmp_path, 60)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) > 3
    assert names == [f"{i * SEGMENT:020d}" for i in range(len(names))]
    for phys, size, _ in written:
        assert phys // SEGMENT == (phys + size - 1) // SEGMENT
    log, end = reopen(tmp_path)
    assert [m.body for m in (log.read_message(p, s) for p, s, _ in written)] == [
        b for _, _, b in written
    ]
    assert [o for _, _, o in log.iter_units(0, end)] == [p for p, _, _ in written]
    log.close()


def test_queue_offsets_are_per_queue(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, SEGMENT, HOST)
    log.load()
    log.recover(0)
    batch = encode_messages([make_message(i, queue_id=i % 2) for i in range(6)], **LIMITS)
    log.append(batch, 1)
    assert batch.head["queue_offset"].tolist() == [0, 0, 1, 1, 2, 2]
    log.close()


def last_two_units(written: list[tuple[int, int, bytes]]) -> range:
    start = written[-2][0]
    end = written[-1][0] + written[-1][1]
    return range(start, end)


def test_truncation_at_every_byte_of_the_last_two_units(tmp_path: Path) -> None:
    original = tmp_path / "original"
    written = fill(original, 12)
    work = tmp_path / "work"
    for cut in last_two_units(written):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(original, work)
        seg_path = work / f"{cut - cut % SEGMENT:020d}"
        data = bytearray(seg_path.read_bytes())
        local = cut % SEGMENT
        data[local:] = bytes(len(data) - local)
        seg_path.write_bytes(bytes(data))
        for later in work.iterdir():
            if int(later.name) > cut:
                later.unlink()
        log, end = reopen(work)
        survivors = [p for p, s, _ in written if p + s <= cut]
        last_end = max(p + s for p, s, _ in written if p + s <= cut)
        assert last_end <= end <= max(cut, last_end), cut  # may include an intact blank
        assert [o for _, _, o in log.iter_units(0, end)] == survivors
        log.close()


@pytest.mark.parametrize("seed", range(8))
def test_garbage_from_a_random_point_keeps_exactly_the_prefix(tmp_path: Path, seed: int) -> None:
    written = fill(tmp_path, 30)
    rng = random.Random(seed)
    victim = rng.randrange(len(written) // 2, len(written))
    phys, size, _ = written[victim]
    cut = phys + rng.randrange(size)
    seg_path = tmp_path / f"{cut - cut % SEGMENT:020d}"
    data = bytearray(seg_path.read_bytes())
    local = cut % SEGMENT
    data[local:] = rng.randbytes(len(data) - local)
    seg_path.write_bytes(bytes(data))
    log, end = reopen(tmp_path, from_offset=written[victim // 2][0])
    assert end == phys
    assert [o for _, _, o in log.iter_units(0, end)] == [p for p, _, _ in written[:victim]]
    # The tail was zeroed: appending again and recovering finds only the new units.
    appended_end = log.append(encode_messages([make_message(999)], **LIMITS), 5)
    log.close()
    log, end2 = reopen(tmp_path, from_offset=phys)
    assert end2 == appended_end
    assert log.read_message(phys).body == make_message(999).body
    log.close()


def test_recovery_reports_dropped_bytes_and_segments(tmp_path: Path) -> None:
    written = fill(tmp_path, 40)
    phys, _size, _ = written[5]
    seg_path = tmp_path / f"{phys - phys % SEGMENT:020d}"
    data = bytearray(seg_path.read_bytes())
    data[phys % SEGMENT + 40] ^= 0xFF  # inside unit 5's header
    seg_path.write_bytes(bytes(data))
    log = CommitLog(tmp_path, SEGMENT, HOST)
    log.load()
    report = log.recover(0)
    assert report.end_offset == phys
    assert "CRC" in report.problem and seg_path.name in report.problem
    assert report.dropped_segments  # later segments went with the tail
    last_phys, last_size, _ = written[-1]
    assert report.dropped_bytes >= last_phys + last_size - phys - SEGMENT
    log.close()


def test_corruption_below_the_recovery_point_raises_on_read(tmp_path: Path) -> None:
    written = fill(tmp_path, 20)
    phys, size, _ = written[3]
    seg_path = tmp_path / f"{phys - phys % SEGMENT:020d}"
    data = bytearray(seg_path.read_bytes())
    data[phys % SEGMENT + layout.HEADER_SIZE] ^= 0x01  # first body byte
    seg_path.write_bytes(bytes(data))
    log, end = reopen(tmp_path, from_offset=written[10][0])  # checkpoint past the damage
    assert end == written[-1][0] + written[-1][1]
    with pytest.raises(CorruptionError) as info:
        log.read_message(phys, size)
    assert seg_path.name in str(info.value) and str(phys) in str(info.value)
    with pytest.raises(CorruptionError):
        list(log.iter_units(0, end, verify=True))
    log.close()


def test_missing_middle_segment_is_corruption(tmp_path: Path) -> None:
    fill(tmp_path, 60)
    (tmp_path / f"{SEGMENT:020d}").unlink()
    log = CommitLog(tmp_path, SEGMENT, HOST)
    with pytest.raises(CorruptionError, match="missing"):
        log.load()


def test_read_outside_the_log_is_out_of_range(tmp_path: Path) -> None:
    fill(tmp_path, 3)
    log, end = reopen(tmp_path)
    with pytest.raises(OffsetOutOfRangeError, match="min is 0"):
        log.read_message(end + SEGMENT * 10)
    log.close()
