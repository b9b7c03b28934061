"""The operator's page, as a person sees it: Debian's Chromium, headless, against the local host of the real app
with function keys enforced. Screenshots at 1280 px and at phone width go to .devstack/ for a person to look at."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from tests.dashboard.conftest import DASHBOARD_KEY, KEYS, SCREENSHOTS, PageStack
from tests.host.test_keys import HOST_KEY

pytestmark = pytest.mark.browser

WAIT_MS = 60_000  # generous: the machine is shared; every wait ends as soon as the page shows what it waits for


def open_page(page: Any, stack: PageStack, key: str = HOST_KEY) -> Any:
    response = page.goto(f"{stack.url}/api/dashboard?code={key}&refresh=1")
    assert response.status == 200, response.status
    return response


def batch_card(page: Any, batch_id: str) -> Any:
    return page.locator(f'article[data-batch="{batch_id}"]')


def test_the_page_draws_every_section_from_the_api_with_the_key_in_a_header_and_no_console_error(
    page: Any, page_stack: PageStack
) -> None:
    api_calls: list[Any] = []
    page.on("request", lambda r: api_calls.append(r) if "/api/" in r.url and "dashboard" not in r.url else None)
    open_page(page, page_stack)

    queue = page_stack.stack.work_queue
    expect(page.locator("#queues table:not(.tenants) tbody tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#queues tbody tr td").first).to_have_text(queue)
    # Each tenant's lanes and quota use, beside the partitions (the shared tenant's here).
    expect(page.locator("#queues table.tenants tbody tr", has_text="default")).to_have_count(1)
    headings = ("Queues", "Recent batches newest first", "Wake latency", "Storage transactions since start")
    for heading in (*headings, "Parked chunks poison queues"):
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
    expect(page.locator("#updated")).to_contain_text("refreshes every 1 s")
    expect(page.locator("#auth")).to_be_hidden()

    assert {r.url.split("/api/")[1].split("?")[0] for r in api_calls} >= {"queues", "batches", "poison"}
    for request in api_calls:
        assert request.headers.get("x-functions-key") == HOST_KEY, request.url
        assert "code=" not in request.url, "the key travels in a header, never in an API URL"
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0
    assert page.context.cookies() == []
    assert HOST_KEY not in page.content(), "the key is never written into the page"
    assert page_stack.seen == []


def test_a_batch_submitted_through_the_api_appears_and_its_bar_reaches_100_percent(
    page: Any, page_stack: PageStack
) -> None:
    open_page(page, page_stack)
    accepted = page_stack.submit([{"id": f"ok-{n}"} for n in range(120)])
    card = batch_card(page, accepted["batch_id"])

    expect(card.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "100", timeout=WAIT_MS)
    expect(card).to_contain_text("100% · 120 succeeded · 0 failed · 0 pending of 120")
    expect(card).to_contain_text("completed")
    expect(card.locator("dd").nth(1)).to_have_text("done")
    expect(page.locator("#batches article").first).to_have_attribute("data-batch", accepted["batch_id"])
    expect(page.locator(f'#wake svg rect >> title:text-matches("{accepted["batch_id"]}")')).to_have_count(1)
    expect(page.locator("#cost .saving")).to_contain_text("fewer than the built-in trigger")
    assert page_stack.seen == []


def test_a_parked_chunk_appears_and_its_replay_button_replays_it_after_a_confirmation(
    page: Any, page_stack: PageStack
) -> None:
    page_stack.broken_flag.touch()
    held = page_stack.broken_flag.with_name(page_stack.broken_flag.name + ".held")
    held.touch()  # the second chunk (items 25-29) waits: the batch is still processing when it is replayed
    items = [{"id": f"p-{n}", "poison": n == 7, "held": n == 29} for n in range(30)]
    accepted = page_stack.submit(items)
    open_page(page, page_stack)
    row = page.locator("#parked tbody tr", has_text=accepted["batch_id"][:8])
    expect(row).to_have_count(1, timeout=WAIT_MS)
    expect(row).to_contain_text("item p-7 refused by the broken dependency")
    card = batch_card(page, accepted["batch_id"])
    expect(card).to_contain_text("24 succeeded · 1 failed · 5 pending of 30", timeout=WAIT_MS)
    screenshots(page)

    page_stack.broken_flag.unlink()  # the cause is fixed
    row.get_by_role("button", name="Replay").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"batch {accepted['batch_id'][:8]}")
    page.screenshot(path=SCREENSHOTS / "dashboard-replay-confirm.png")
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.locator("#replay-answer")).to_have_text("Replay cancelled: nothing was changed.")
    expect(row).to_have_count(1)

    row.get_by_role("button", name="Replay").click()
    dialog.get_by_role("button", name="Replay", exact=True).click()
    expect(page.locator("#replay-answer")).to_contain_text("Replayed 1 chunk(s), skipped 0.", timeout=WAIT_MS)
    expect(row).to_have_count(0, timeout=WAIT_MS)
    held.unlink()
    expect(card.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "100", timeout=WAIT_MS)
    expect(card).to_contain_text("30 succeeded · 0 failed · 0 pending of 30", timeout=WAIT_MS)
    assert page_stack.seen == []


def screenshots(page: Any) -> None:
    """The page as it is now, whole, at 1280 px and at a phone's 390 px, for a person to look at."""
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=SCREENSHOTS / "dashboard-1280.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than a phone's screen"
    page.screenshot(path=SCREENSHOTS / "dashboard-390.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_without_a_key_the_host_answers_401_and_a_key_of_the_page_alone_shows_the_401_and_the_way_in(
    page: Any, page_stack: PageStack
) -> None:
    # The route is function-level: the host refuses it before the app runs, with an empty 401, and Chromium
    # shows its own error page for it (a navigation Playwright reports as failed).
    refused: list[int] = []
    page.on("response", lambda r: refused.append(r.status) if r.url.endswith("/api/dashboard") else None)
    with pytest.raises(PlaywrightError, match="ERR_HTTP_RESPONSE_CODE_FAILURE"):
        page.goto(f"{page_stack.url}/api/dashboard")
    assert refused == [401]
    expect(page.locator("body")).to_contain_text("HTTP ERROR 401")

    open_page(page, page_stack, key=DASHBOARD_KEY)
    banner = page.get_by_role("alert")
    expect(banner).to_be_visible(timeout=WAIT_MS)
    expect(banner).to_contain_text("401 Unauthorized")
    expect(banner).to_contain_text("/api/dashboard?code=KEY")
    expect(banner).to_contain_text("host key")
    expect(page.locator("#updated")).to_contain_text("401 Unauthorized: not refreshing")
    expect(page.locator("#queues [data-error]")).to_contain_text("401")
    page.screenshot(path=SCREENSHOTS / "dashboard-401.png")
    assert all(key not in page.content() for key in KEYS.values())
    assert all(key not in page_stack.stack.host_logs() for key in KEYS.values()), "no key in the host's log"


def test_a_waiting_batch_is_cancelled_from_its_card_after_a_confirmation(page: Any, page_stack: PageStack) -> None:
    body = "\n".join(f'{{"id": "w-{n}"}}' for n in range(40)).encode()
    reply = page_stack.request("POST", "/api/batches?not_before=600", body, {"Content-Type": "application/x-ndjson"})
    assert reply.status == 202, reply.body[:300]
    batch_id = reply.json()["batch_id"]
    open_page(page, page_stack)
    card = batch_card(page, batch_id)
    button = card.get_by_role("button", name="Cancel batch")
    expect(button).to_be_visible(timeout=WAIT_MS)

    button.click()
    dialog = page.get_by_role("dialog", name="Cancel this batch?")
    expect(dialog).to_contain_text(f"Batch {batch_id[:8]}: 40 of 40 item(s) still pending.")
    dialog.get_by_role("button", name="Keep it").click()
    expect(page.locator("#cancel-answer")).to_have_text("Nothing was cancelled.")
    status = page_stack.request("GET", f"/api/batches/{batch_id}").json()
    assert status["status"] == "scheduled", "keeping it changed nothing"

    button.click()
    dialog.get_by_role("button", name="Cancel batch").click()
    expect(page.locator("#cancel-answer")).to_have_text(
        f"Batch {batch_id[:8]} is cancelled: 0 succeeded, 0 failed, 40 cancelled.", timeout=WAIT_MS
    )
    status = page_stack.request("GET", f"/api/batches/{batch_id}").json()
    assert status["status"] == "cancelled"
    assert page_stack.seen == []
