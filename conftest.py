"""Suite-wide pytest set-up: what a run leaves on disk.

A full run starts hundreds of brokers whose commitlog segments and index files are
preallocated (up to 1 GiB each with default settings): kept, their stores added up to
~20 GB per run, and pytest keeps its last runs' directories. So:

* a passing test's ``tmp_path`` is deleted once the test's teardown is over (every
  fixture finalized, so no broker is still writing there); a failing test's is kept;
* pytest keeps one earlier run (``tmp_path_retention_count`` in pyproject.toml);
* doctests that make stores with ``tempfile.mkdtemp()`` (as the docstrings show users)
  make them in a directory of their own that goes when the doctest ends.

And what a test leaves in the main thread: a test that leaves it without a current event
loop (``asyncio.run`` there does) fails, see ``tests/event_loops.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem

from tests.event_loops import main_thread_loop_problem

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield  # an exception here (a failing finalizer) keeps the directory
    funcargs = getattr(item, "funcargs", None) or {}
    path = funcargs.get("tmp_path")
    if isinstance(path, Path) and not item.stash.get(_FAILED, False):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _doctest_temp_dir(request: pytest.FixtureRequest) -> Iterator[None]:
    if not isinstance(request.node, DoctestItem):
        yield
        return
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    path = factory.mktemp("doctest")
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _main_thread_keeps_an_event_loop() -> Iterator[None]:
    """Fail the test that leaves the main thread without a usable current event loop.

    The official Python client's gRPC calls made in the main thread need one; left broken,
    a later, unrelated test's client would fail now and then. The loop is restored (a new
    one) so only the culprit fails.
    """
    yield
    problem = main_thread_loop_problem()
    if problem is not None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        pytest.fail(
            f"this test left the main thread without a usable event loop ({problem}); "
            "run asyncio with tests.event_loops.run_in_own_thread instead of asyncio.run"
        )
