"""Fixtures of the web console's tests: a real broker, the console on a free loopback port
and one headless Chromium per module (Debian's ``chromium``, installed by ``./dev``,
driven by Playwright with its executable path: Playwright's own browser download is not
used).

``console_page`` hands out a fresh page whose console errors and uncaught exceptions are
collected; the test fails at teardown if any appeared. Screenshots of the main pages go to
``build/console-shots/``, or to ``$RMQ_CONSOLE_SHOTS``: the README's pictures were made
with ``RMQ_CONSOLE_SHOTS=docs/console .venv/bin/python -m pytest tests/console``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from broker_core.console.server import ConsoleServer, start_console

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / os.environ.get("RMQ_CONSOLE_SHOTS", "build/console-shots")


def chromium_path() -> str:
    found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("Debian's chromium is missing: ./dev installs it (chromium package)")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


def new_console(endpoints: str) -> ConsoleServer:
    return start_console("127.0.0.1:0", endpoints=endpoints)


class PageErrors:
    """Console errors and page exceptions seen by one page."""

    def __init__(self, page: Page) -> None:
        self.seen: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.seen.append(f"pageerror: {exc}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.seen.append(f"console: {message.text}")


def open_page(browser: Browser, base_url: str) -> tuple[Page, PageErrors]:
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # confirmations say yes
    return page, PageErrors(page)


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
