"""The console's pages in a real browser, on a real broker with data the tests make: each
page loads without a console error and shows that data, and each write action works
from the page. Screenshots of the main pages go to docs/console/."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser, Page, expect
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from broker_core.console.server import ConsoleServer
from tests.console.conftest import PageErrors, new_console, open_page, shot
from tests.server.conftest import BrokerProcess, start_broker
from tests.server.test_simple_consumer import received

TOPIC, GROUP, DEAD_GROUP = "orders", "billing", "payments"
MESSAGES = 6  # over 2 queues
CONSUMED_Q0 = 2  # the group committed this far in queue 0 and nothing in queue 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("console"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint, timeout_s=10) as c:
        c.create_topic(TOPIC, queues=2)
        c.create_group(GROUP, consume_from_where="first_offset")
        c.create_group(DEAD_GROUP, consume_from_where="first_offset")
        for i in range(MESSAGES):
            c.send(TOPIC, json.dumps({"order": i, "item": "book"}), keys=[f"order-{i}"], tag="new")
        c.update_offset(GROUP, TOPIC, 0, CONSUMED_Q0)
        c.update_offset(GROUP, TOPIC, 1, 0)
        yield c


@pytest.fixture(scope="module")
def dead_letter(broker: BrokerProcess, client: RocketMQClient) -> str:
    """A message of its own topic that DEAD_GROUP received and dead-lettered; its id."""
    client.create_topic("invoices", queues=1)
    client.send("invoices", "cannot parse me", keys=["bad-invoice"])
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        [m] = received(stub, "invoices", DEAD_GROUP)
        forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=DEAD_GROUP),
            topic=pb.Resource(name="invoices"),
            receipt_handle=m.system_properties.receipt_handle,
            message_id=m.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=1,
        )
        assert stub.ForwardMessageToDeadLetterQueue(forward, timeout=5).status.code == pb.Code.OK
    return str(m.system_properties.message_id)


@pytest.fixture(scope="module")
def console(client: RocketMQClient, broker: BrokerProcess) -> Iterator[ConsoleServer]:
    server = new_console(broker.endpoint)
    yield server
    server.stop()


@pytest.fixture
def opened(browser: Browser, console: ConsoleServer) -> Iterator[tuple[Page, PageErrors]]:
    page, errors = open_page(browser, console.url)
    yield page, errors
    page.context.close()
    assert errors.seen == [], errors.seen


@pytest.fixture
def page(opened: tuple[Page, PageErrors]) -> Page:
    return opened[0]


@pytest.fixture
def page_errors(opened: tuple[Page, PageErrors]) -> PageErrors:
    return opened[1]


def lag(client: RocketMQClient) -> int:
    return int(client.group_progress(GROUP, TOPIC)["total_lag"])


def test_overview_shows_the_broker_and_a_live_tps_chart(page: Page, broker: BrokerProcess) -> None:
    page.goto("/")
    row = page.locator("#brokers tr[data-broker='broker-a']")
    expect(row).to_contain_text("master")
    expect(row).to_contain_text(broker.endpoint)
    expect(row).to_contain_text("0.1.0")
    expect(page.locator("#healthy")).to_be_visible()
    # the chart has plotted two samples of /api/overview (it polls every 2 s)
    page.wait_for_function(
        "Number(document.querySelector('#tps-chart').dataset.points || 0) >= 2", timeout=15_000
    )
    shot(page, "overview")


def test_topics_page_shows_the_message_count(page: Page, client: RocketMQClient) -> None:
    page.goto("/topics")
    expect(page.locator(f"#topics tr[data-topic='{TOPIC}'] .messages")).to_have_text(str(MESSAGES))
    shot(page, "topics")


def test_topic_page_shows_queues_route_and_sends_a_test_message(
    page: Page, client: RocketMQClient
) -> None:
    before = sum(q["max_offset"] for q in client.topic_status(TOPIC))
    page.goto(f"/topics/{TOPIC}")
    expect(page.locator("#message-count")).to_have_text(str(before))
    expect(page.locator("#queues time")).to_have_count(2)  # each queue's last store time
    expect(page.locator("#route")).to_contain_text("READ_WRITE")
    shot(page, "topic")
    page.fill("#send-message input[name=body]", "from the console")
    page.fill("#send-message input[name=keys]", "console-key")
    page.click("#send-message button")
    expect(page.locator("#message-count")).to_have_text(str(before + 1))
    [found] = client.query_message(key="console-key", topic=TOPIC, text_bodies=True)
    assert found["body"] == "from the console"


def test_create_update_refuse_and_delete_a_topic_from_the_page(
    page: Page, page_errors: PageErrors, client: RocketMQClient
) -> None:
    page.goto("/topics")
    page.fill("#create-topic input[name=name]", "fresh")
    page.fill("#create-topic input[name=queues]", "3")
    page.click("#create-topic button")
    expect(page).to_have_url(re.compile(r"/topics/fresh$"))
    assert {t["name"]: t["read_queue_nums"] for t in client.list_topics()}["fresh"] == 3
    # the same refusal as `rmq topic create`: other settings of an existing topic need update
    page.goto("/topics")
    page.fill("#create-topic input[name=name]", "fresh")
    page.fill("#create-topic input[name=queues]", "5")
    page.click("#create-topic button")
    expect(page.locator("#create-topic [data-result]")).to_contain_text("pass update")
    assert page_errors.seen == [
        "console: Failed to load resource: the server responded with a status of 409 (Conflict)"
    ]
    page_errors.seen.clear()  # the refusal was the point
    page.goto("/topics/fresh")
    page.fill("#update-topic input[name=write_queues]", "4")
    page.click("#update-topic button")
    expect(page.locator("#update-topic [data-result]")).to_contain_text("done")
    assert {t["name"]: t["write_queue_nums"] for t in client.list_topics()}["fresh"] == 4
    page.click("#delete-topic button")  # the confirmation is accepted (conftest)
    expect(page.locator("#topics")).to_be_visible()
    assert "fresh" not in {t["name"] for t in client.list_topics()}


def test_group_page_shows_lag_and_a_reset_changes_it(page: Page, client: RocketMQClient) -> None:
    expected = MESSAGES - CONSUMED_Q0 + (1 if _sent_by_console(client) else 0)
    assert lag(client) == expected
    page.goto("/groups")
    expect(page.locator(f"#groups tr[data-group='{GROUP}'] .lag")).to_have_text(str(expected))
    expect(page.locator("#groups")).not_to_contain_text("rmq-console")
    shot(page, "groups")
    page.goto(f"/groups/{GROUP}")
    expect(page.locator("#total-lag")).to_have_text(str(expected))
    expect(page.locator("#config")).to_contain_text("first_offset")
    expect(page.locator("#config")).to_contain_text("max 16 retries")
    page.wait_for_function(
        "Number(document.querySelector('#lag-chart').dataset.points || 0) >= 1", timeout=15_000
    )
    shot(page, "group")
    page.fill("#reset-offsets input[name=to]", "latest")
    page.click("#reset-offsets button")
    expect(page.locator("#total-lag")).to_have_text("0")
    assert lag(client) == 0
    page.fill("#reset-offsets input[name=to]", "earliest")
    page.click("#reset-offsets button")
    total = sum(q["max_offset"] for q in client.topic_status(TOPIC))
    expect(page.locator("#total-lag")).to_have_text(str(total))


def test_group_page_and_cli_show_the_online_clients(
    page: Page, broker: BrokerProcess, client: RocketMQClient
) -> None:
    expect_clients = page.locator("#clients")
    page.goto(f"/groups/{DEAD_GROUP}")
    expect(expect_clients).to_have_text("none")
    with grpc.insecure_channel(broker.endpoint) as channel:  # a consumer's heartbeat
        beat = service_pb2.HeartbeatRequest(
            group=pb.Resource(name=DEAD_GROUP), client_type=pb.ClientType.SIMPLE_CONSUMER
        )
        answer = service_pb2_grpc.MessagingServiceStub(channel).Heartbeat(
            beat, metadata=[("x-mq-client-id", "cid-console-test")], timeout=5
        )
        assert answer.status.code == pb.Code.OK
    assert client.group_progress(DEAD_GROUP)["clients"] == ["cid-console-test"]
    page.goto(f"/groups/{DEAD_GROUP}")
    expect(expect_clients).to_have_text("cid-console-test")
    shown = CliRunner().invoke(
        cli, ["group", "clients", DEAD_GROUP, "--json", "--endpoints", broker.endpoint]
    )
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {"group": DEAD_GROUP, "clients": ["cid-console-test"]}


def _sent_by_console(client: RocketMQClient) -> bool:
    return bool(client.query_message(key="console-key", topic=TOPIC))


def test_message_found_by_key_shows_its_body_and_resends_to_a_group(
    page: Page, client: RocketMQClient
) -> None:
    page.goto(f"/messages?topic={TOPIC}&key=order-3")
    expect(page.locator("#found")).to_have_text("1 found")
    expect(page.locator("#results")).to_contain_text('"order": 3')
    shot(page, "messages")
    page.click("#results a")
    expect(page.locator("#body")).to_contain_text('"item": "book"')
    expect(page.locator("#properties")).to_contain_text("order-3")
    expect(page.locator("#trace")).to_contain_text("no trace records")
    shot(page, "message")
    retry = f"%RETRY%{GROUP}"
    before = sum(q["max_offset"] for q in client.topic_status(retry))
    page.select_option("#resend select[name=group]", GROUP)
    page.click("#resend button")
    expect(page.locator("#resend [data-result]")).to_contain_text("resent")
    assert sum(q["max_offset"] for q in client.topic_status(retry)) == before + 1


def test_messages_by_id_and_by_time(page: Page, client: RocketMQClient) -> None:
    [m] = client.query_message(key="order-0", topic=TOPIC)
    page.goto(f"/messages?msg_id={m['message_id']}")
    expect(page.locator("#found")).to_have_text("1 found")
    page.goto(f"/messages?topic={TOPIC}&begin={m['store_timestamp_ms']}")
    expect(page.locator("#results")).to_contain_text('"order": 0')
    expect(page.locator("#results")).to_contain_text('"order": 5')


def test_dlq_page_shows_browses_and_resends_dead_letters(
    page: Page, client: RocketMQClient, dead_letter: str
) -> None:
    page.goto("/dlq")
    expect(page.locator(f"#dlq tr[data-group='{DEAD_GROUP}'] .messages")).to_have_text("1")
    page.click(f"#dlq tr[data-group='{DEAD_GROUP}'] a")
    expect(page.locator("#dead-letters")).to_contain_text("cannot parse me")
    expect(page.locator("#dead-letters")).to_contain_text(dead_letter)
    shot(page, "dlq")
    retry = f"%RETRY%{DEAD_GROUP}"
    page.click("#dead-letters .resend-one button")
    expect(page.locator("#dead-letters .resend-one [data-result]")).to_contain_text("resent")
    page.click("#resend-all button")
    expect(page.locator("#resend-all [data-result]")).to_contain_text("resent")
    copies = client.query_message(key="bad-invoice", topic=retry, text_bodies=True)
    assert [c["body"] for c in copies] == ["cannot parse me"] * 2


def test_acl_page_with_authentication_off_shows_the_broker_answer(page: Page) -> None:
    page.goto("/acl")
    expect(page.locator("h1")).to_have_text("Users and access rules")


def _call(url: str, method: str = "GET", body: Any = None, headers: Any = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            json.loads(response.read())
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_every_api_read_answers_json(console: ConsoleServer, dead_letter: str) -> None:
    base = console.url.rstrip("/")
    for path in (
        "/api/session",
        "/api/overview",
        "/api/topics",
        f"/api/topics/{TOPIC}",
        "/api/groups",
        f"/api/groups/{GROUP}",
        f"/api/messages?topic={TOPIC}&key=order-1",
        f"/api/messages/{dead_letter}",
        "/api/dlq",
        f"/api/dlq/{DEAD_GROUP}",
        "/api/acl",
    ):
        assert _call(base + path) == 200, path
    assert _call(base + "/api/topics/no-such-topic") == 404


def test_writes_without_the_csrf_token_are_refused(
    console: ConsoleServer, client: RocketMQClient
) -> None:
    base = console.url.rstrip("/")
    json_type = {"Content-Type": "application/json"}
    assert _call(base + "/api/topics", "POST", {"name": "csrf-less"}, json_type) == 403
    assert _call(base + f"/api/topics/{TOPIC}", "DELETE", None, {"X-CSRF-Token": "forged"}) == 403
    assert "csrf-less" not in {t["name"] for t in client.list_topics()}
    assert TOPIC in {t["name"] for t in client.list_topics()}
