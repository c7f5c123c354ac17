"""The store lock: one broker process per store directory.

Two brokers on one store would both "recover" it (the second removes the first's
``abort`` marker), hand out the same queue offsets and overwrite each other's bytes, so
messages already acknowledged are lost. Like RocketMQ's ``{storePathRootDir}/lock``,
the store takes an exclusive ``flock`` on ``STORE_DIR/lock`` for the broker's whole
life; a second opener fails at once with :class:`~broker_core.errors.StoreLockedError`
naming the holder's pid (written into the file by the holder).

Crash contract: the kernel releases the lock when the holder's process dies (SIGKILL
included), so a crash never leaves a stale lock; the file itself stays and is reused.
``flock`` locks belong to an open file description, so two stores in one process
conflict too. Threads: ``acquire``/``release`` belong to the store's owner.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from broker_core.errors import StoreError, StoreLockedError

LOCK_FILE = "lock"


class StoreLock:
    """An exclusive, non-blocking lock on one store directory."""

    def __init__(self, store_dir: Path) -> None:
        self.path = store_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (no-op if held); StoreLockedError if another process holds it."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the store lock {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.path.parent} is locked by another broker "
                f"(pid {holder}); stop it first, or use another --store-dir"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot lock the store {self.path}: {exc.strerror}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (no-op if not held); the file stays for the next holder."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)  # closing the only descriptor releases the flock


def _read_pid(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return text if text.isdigit() else "unknown"
