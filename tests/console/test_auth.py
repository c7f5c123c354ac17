"""The console with authentication on: nothing answers without a login, every call is
made as the logged-in user (a read-only user's topic creation is the broker's refusal,
shown on the page), and no secret key reaches a page, an API answer or a log line."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from broker_core.client import RocketMQClient
from broker_core.console.server import ConsoleServer
from tests.console.conftest import new_console, open_page, shot
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.server.conftest import BrokerProcess

READER, READER_SECRET = "reader", "reader-secret-42"
PAGES = (
    "/",
    "/topics",
    "/topics/orders",
    "/groups",
    "/groups/g1",
    "/messages",
    "/messages/0123?topic=orders",
    "/dlq",
    "/acl",
)
API_READS = (
    "/api/overview",
    "/api/topics",
    "/api/topics/orders",
    "/api/groups",
    "/api/groups/g1",
    "/api/messages?topic=orders&key=k",
    "/api/messages/0123",
    "/api/dlq",
    "/api/dlq/g1",
    "/api/acl",
)
API_WRITES = (
    ("POST", "/api/topics"),
    ("DELETE", "/api/topics/orders"),
    ("POST", "/api/topics/orders/messages"),
    ("POST", "/api/groups/g1/reset"),
    ("POST", "/api/messages/0123/resend"),
    ("POST", "/api/dlq/g1/resend"),
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with(tmp_path_factory.mktemp("console-auth"), extra_toml=AUTH_TOML)
    with RocketMQClient(proc.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET) as admin:
        admin.create_topic("orders", queues=1)
        admin.create_group("g1")
        admin.send("orders", "secret-free body", keys=["k"])
        admin.create_user(READER, READER_SECRET)
        admin.create_acl(READER, "Topic:*", ["Get", "List", "Sub"])
        admin.create_acl(READER, "Group:*", ["Get", "List", "Sub"])
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleServer]:
    server = new_console(broker.endpoint)
    yield server
    server.stop()


def status_of(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, str]:
    """Status and final URL, without a session cookie."""
    headers = {"Content-Type": "application/json", "X-CSRF-Token": "guess"}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.url
    except urllib.error.HTTPError as exc:
        return int(exc.code), url


def test_no_page_or_api_call_answers_without_a_login(console: ConsoleServer) -> None:
    base = console.url.rstrip("/")
    for path in PAGES:
        status, landed = status_of(base + path)
        assert (status, landed.split("?")[0]) == (200, base + "/login"), path
    for path in API_READS:
        assert status_of(base + path)[0] == 401, path
    for method, path in API_WRITES:
        # no session: the CSRF check refuses first; with a session and token, 401 (below)
        assert status_of(base + path, method, b"{}")[0] in (401, 403), path


def login(page: Page, access_key: str, secret_key: str) -> None:
    page.goto("/topics")
    expect(page).to_have_url(f"{page.url.split('/login')[0]}/login?next=/topics")
    page.fill("#login input[name=access_key]", access_key)
    page.fill("#login input[name=secret_key]", secret_key)
    page.click("#login button")


def test_a_wrong_secret_is_refused(browser: Browser, console: ConsoleServer) -> None:
    page, errors = open_page(browser, console.url)
    login(page, READER, "not-the-secret")
    expect(page.locator("#login [data-result]")).to_contain_text("refused")
    assert len(errors.seen) == 1 and "401" in errors.seen[0], errors.seen
    assert status_of_with(page, "/api/topics") == 401
    page.context.close()


def status_of_with(page: Page, path: str) -> int:
    """The status of an API read made with the page's session cookie."""
    return int(page.request.get(path).status)


def test_a_read_only_user_sees_topics_but_cannot_create_one(
    browser: Browser, console: ConsoleServer, broker: BrokerProcess
) -> None:
    page, errors = open_page(browser, console.url)
    login(page, READER, READER_SECRET)
    expect(page.locator("#topics tr[data-topic='orders'] .messages")).to_have_text("1")
    expect(page.locator("nav .user")).to_contain_text(READER)
    page.fill("#create-topic input[name=name]", "not-allowed")
    page.click("#create-topic button")
    result = page.locator("#create-topic [data-result]")
    expect(result).to_contain_text("refused")
    expect(result).to_contain_text(READER)  # the broker's own words: who lacks which right
    assert errors.seen == [
        "console: Failed to load resource: the server responded with a status of 403 (Forbidden)"
    ]
    with RocketMQClient(broker.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET) as admin:
        assert "not-allowed" not in {t["name"] for t in admin.list_topics()}
    page.goto("/acl")
    expect(page.locator("#acl-error")).to_be_visible()  # users and rules: super users only
    page.context.close()


def test_an_admin_sees_users_and_rules_and_no_secret_anywhere(
    browser: Browser, console: ConsoleServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    page, errors = open_page(browser, console.url)
    login(page, ADMIN_KEY, ADMIN_SECRET)
    expect(page.locator("#topics")).to_be_visible()
    page.goto("/acl")
    expect(page.locator("#users")).to_contain_text(READER)
    expect(page.locator("#rules")).to_contain_text("Topic:*")
    shot(page, "acl")
    seen = [page.content()]
    for path in ("/api/acl", "/api/session", "/api/overview"):
        seen.append(json.dumps(page.request.get(path).json()))
    cookies = json.dumps(page.context.cookies())
    for secret in (ADMIN_SECRET, READER_SECRET):
        assert all(secret not in text for text in seen)
        assert secret not in cookies
        assert secret not in caplog.text
    page.click("nav button[data-logout]")
    expect(page).to_have_url(f"{console.url}login")
    assert status_of_with(page, "/api/topics") == 401
    assert errors.seen == []
    page.context.close()


def test_a_session_id_from_before_the_login_is_worth_nothing_after_it(
    browser: Browser, console: ConsoleServer
) -> None:
    page, errors = open_page(browser, console.url)
    page.goto("/login")
    [planted] = page.context.cookies()
    login(page, READER, READER_SECRET)
    expect(page.locator("#topics")).to_be_visible()
    [after] = page.context.cookies()
    assert after["value"] != planted["value"]
    assert status_of_with(page, "/api/topics") == 200
    other = browser.new_context(base_url=console.url)
    other.add_cookies([planted])  # e.g. an id an attacker obtained and planted beforehand
    assert int(other.request.get("/api/topics").status) == 401
    other.close()
    assert errors.seen == []
    page.context.close()
