"""Atomic config files written by several threads at once (``store/atomic_file``).

A slave copying its master's group table and a pull auto-creating a group both write
``subscriptionGroup.json``; every write must succeed and the file must end whole, holding
one of the writes, with a ``.bak`` that also loads.
"""

from __future__ import annotations

import threading
from pathlib import Path

from broker_core.store.atomic_file import read_json_atomic, write_json_atomic

THREADS = 8
WRITES = 200


def test_concurrent_writers_of_one_file_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    errors: list[OSError] = []
    start = threading.Barrier(THREADS)

    def writer(n: int) -> None:
        start.wait()
        try:
            for i in range(WRITES):
                write_json_atomic(path, {"writer": n, "write": i})
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, f"{len(errors)} writes failed, e.g. {errors[0]!r}"
    loaded = read_json_atomic(path)
    assert loaded.source == "file" and loaded.data["write"] == WRITES - 1
    backup = read_json_atomic(path.with_name(path.name + ".bak"))
    assert backup.source == "file" and backup.data["writer"] in range(THREADS)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".bak"]
