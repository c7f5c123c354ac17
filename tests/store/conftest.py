"""Shared fixtures for store tests: small files so roll-over and retention happen fast."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.config import StoreConfig
from broker_core.message import Message
from broker_core.store.columns import encode_messages
from broker_core.store.message_store import MessageStore
from broker_core.store.packer import pack_units

UNIT_LIMITS: dict[str, int] = dict(max_body_bytes=1 << 20, max_properties_bytes=1 << 15)


def seal(
    msg: Message,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0),
    **limits: int,
) -> bytes:
    """One finished unit of ``msg`` on its own, packed by the store's one packer."""
    batch = encode_messages([msg], **(limits or UNIT_LIMITS))
    batch.head["queue_offset"] = queue_offset
    return bytes(pack_units(batch, 0, 1, physical_offset, store_timestamp_ms, store_host))


def small_config(store_dir: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = dict(
        store_dir=str(store_dir),
        segment_size_bytes=64 * 1024,
        max_body_bytes=16 * 1024,
        max_properties_bytes=4 * 1024,
        consume_queue_units_per_file=64,
        index_slot_count=128,
        index_max_entries=256,
        flush_interval_ms=20,
        derived_flush_interval_ms=50,
        cleanup_interval_ms=60_000,
    )
    values.update(overrides)
    return StoreConfig(**values)


def make_message(i: int, topic: str = "orders", queue_id: int = 0, size: int = 0) -> Message:
    body = f"message-{i}|".encode() + bytes(size or (i * 37) % 900)
    return Message(
        topic,
        body,
        queue_id=queue_id,
        properties={
            "TAGS": "even" if i % 2 == 0 else "odd",
            "KEYS": f"key-{i}",
            "UNIQ_KEY": f"ID{i:010d}",
            "n": str(i),
        },
    )


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """Open stores on tmp_path/store (or a given dir); closes them all at the end."""
    opened: list[MessageStore] = []

    def _open(store_dir: Path | None = None, **overrides: Any) -> MessageStore:
        store = MessageStore(small_config(store_dir or tmp_path / "store", **overrides))
        store.open()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
