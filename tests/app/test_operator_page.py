"""The operator's page of recent batches: one document that runs only its own inline style and script, shipped in the
package, and what a refresh costs, API reads counted apart from the work (real Azurite)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from fnmatch import fnmatch
from typing import Any

from shared.ops.costs import BUILTIN_PER_ITEM
from shared.telemetry import metering
from shared.telemetry.activity import ACTIVITY
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.app.listing import ROOT, listed, sales, submit


async def test_api_reads_are_counted_apart_from_the_work_it_is_compared_with(configure, app_functions):
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="50")
    settled_before = ACTIVITY.view()["total"]
    await submit(app_functions, sales("c", 120))
    await drain_all(services)
    assert ACTIVITY.view()["total"] - settled_before == 120, "the drain reported every item it settled"

    async def queues() -> dict[str, Any]:
        response = await app_functions["queue_status"](http_request("GET", "/api/queues"))
        view: dict[str, Any] = json.loads(response.get_body())["storage_transactions"]
        return view

    first, second = await queues(), await queues()
    assert second["reads"]["total"] > first["reads"]["total"], "looking costs reads, and they are counted"
    assert second["work"] == first["work"], "and never as work"
    assert second["total"] == second["work"]["total"] + second["reads"]["total"]
    assert second["work"]["by_operation"]["queue.PutMessage"] >= 3
    items = second["items_settled"]
    assert items >= 120
    assert second["builtin_queue_trigger"]["total"] == round(items * BUILTIN_PER_ITEM)
    assert second["saved"] == second["builtin_queue_trigger"]["total"] - second["work"]["total"]


async def test_a_refresh_of_the_page_costs_eight_reads_a_partition_and_one_listing_plus_one_a_batch(
    configure, app_functions
):
    configure(publisher=RecordingPublisher(), WORK_QUEUE_PARTITIONS="2")
    for n in range(3):
        await submit(app_functions, sales(f"r{n}", 2))

    async def refresh() -> dict[str, int]:
        with metering.tally() as spent:
            for name, request in (
                ("queue_status", http_request("GET", "/api/queues")),
                ("poison_list", http_request("GET", "/api/poison")),
            ):
                assert (await app_functions[name](request)).status_code == 200
            code, _ = await listed(app_functions, limit="10")
            assert code == 200
        return dict(spent)

    await refresh()  # the first look reads the back-off state and creates the poison queues once per process
    assert await refresh() == {
        "queue.GetQueueMetadata": 3 * 2,  # depth and poison depth (queues), poison depth (poison), per partition
        "queue.ListQueues": 2,  # the lanes of each partition (one lane each here: one depth read each)
        # drain leases per partition; the batch index; each listed batch's results; the poison index per partition
        # (the parked listing's page, plus one read per parked chunk shown: none here)
        "blob.ListBlobs": 2 + 1 + 3 + 2,
        "queue.PeekMessages": 2,  # the first parked chunks, per partition
        "blob.GetBlob": 2 * 2,  # the look chain and the quiet lanes' record, per partition
    }


async def test_the_page_is_one_document_that_runs_only_its_own_inline_style_and_script(app_functions):
    response = await app_functions["dashboard"](http_request("GET", "/api/dashboard"))
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    html = response.get_body().decode()
    headers = dict(response.headers)
    assert headers["Cache-Control"] == "no-store"
    assert headers["Referrer-Policy"] == "no-referrer"
    policy = dict(part.strip().split(" ", 1) for part in headers["Content-Security-Policy"].split(";"))
    [style] = re.findall(r"<style>(.*?)</style>", html, flags=re.DOTALL)
    [script] = re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    for text, directive in ((style, "style-src"), (script, "script-src")):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert policy[directive] == f"'sha256-{digest}'", directive
    assert policy["default-src"] == "'none'"
    assert policy["connect-src"] == "'self'"
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(https?:)?//", html), "nothing from elsewhere"
    assert "localStorage" not in script
    assert "document.cookie" not in script
    assert "console." not in script, "the page logs nothing (the key least of all)"


def test_the_page_files_are_in_the_deployed_package():
    ignored = [line.strip() for line in (ROOT / ".funcignore").read_text().splitlines() if line.strip()]
    for name in ("dashboard.html", "dashboard.css", "dashboard.js"):
        path = f"shared/static/{name}"
        assert (ROOT / path).is_file()
        assert not any(fnmatch(path, p) or fnmatch(name, p) or path.startswith(p.rstrip("/") + "/") for p in ignored)
