"""Recent batches, newest first (`GET /api/batches`), from the index written at commit; the operator's page
that reads it; and the counts beside it: API reads apart from the work, and items settled (real Azurite)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from datetime import datetime, timedelta, timezone
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob.aio import BlobClient
from hypothesis import given
from hypothesis import strategies as st

from shared.batch.results import ResultEntry
from shared.core.errors import MalformedRequest
from shared.ops.costs import BUILTIN_PER_ITEM
from shared.ops.progress import batch_progress
from shared.store import batch_index
from shared.store.batch_index import IndexEntry
from shared.telemetry import metering
from shared.telemetry.activity import ACTIVITY
from tests.app.conftest import RecordingPublisher, another_instance, drain_all, http_request

ROOT = Path(__file__).resolve().parents[2]


def sales(token: str, count: int) -> bytes:
    return "\n".join(
        json.dumps({"id": f"{token}-{i}", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"})
        for i in range(count)
    ).encode()


async def submit(app_functions: Any, body: bytes, key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/x-ndjson", **({"Idempotency-Key": key} if key else {})}
    response = await app_functions["submit_batch"](http_request("POST", "/api/batches", body=body, headers=headers))
    assert response.status_code == 202, response.get_body()
    accepted: dict[str, Any] = json.loads(response.get_body())
    return accepted


async def listed(app_functions: Any, **params: str) -> tuple[int, Any]:
    request = func.HttpRequest("GET", "http://localhost:7071/api/batches", params=params, body=b"")
    response = await app_functions["batch_list"](request)
    return response.status_code, json.loads(response.get_body())


async def test_recent_batches_come_newest_first_in_pages_of_one_listing_plus_one_per_batch(configure, app_functions):
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="10")
    code, empty = await listed(app_functions)
    assert (code, empty) == (200, {"batches": [], "continuation": None}), "no batch yet: an empty page, not an error"
    submitted = [await submit(app_functions, sales(f"b{n}", 5 + n)) for n in range(5)]

    pages, token = [], None
    while True:
        with metering.tally() as spent:
            code, page = await listed(app_functions, limit="2", **({"continuation": token} if token else {}))
        assert code == 200, page
        assert dict(spent) == {"blob.ListBlobs": 1 + len(page["batches"])}, "one index listing, one per batch"
        pages.append(page["batches"])
        token = page["continuation"]
        if token is None:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    batches = [b for p in pages for b in p]
    assert [b["batch_id"] for b in batches] == [s["batch_id"] for s in reversed(submitted)]
    assert [b["items"]["total"] for b in batches] == [9, 8, 7, 6, 5]
    assert all(b["status"] == "accepted" and b["items"]["pending"] == b["items"]["total"] for b in batches)
    assert all(b["wake_ms"] is None and b["items_per_s"] is None for b in batches)

    await drain_all(services)
    code, page = await listed(app_functions, limit="5")
    assert code == 200
    for batch in page["batches"]:
        assert batch["status"] == "completed", batch
        assert batch["items"]["succeeded"] == batch["items"]["total"]
        assert batch["items"]["pending"] == 0
        assert batch["eta_s"] == 0
        assert batch["items_per_s"] > 0
        assert batch["wake_ms"] >= 0, "the first result comes after the acceptance"
        status = await app_functions["batch_status"](http_request("GET", "/api/batches/x", batch_id=batch["batch_id"]))
        single = json.loads(status.get_body())
        same = ("status", "items", "accepted_at", "first_result_at", "last_result_at", "completed_at")
        assert {k: batch[k] for k in same} == {k: single[k] for k in same}, "the list agrees with the batch's route"


async def test_a_bad_limit_or_continuation_is_a_json_400_naming_it(configure, app_functions):
    configure(publisher=RecordingPublisher())
    await submit(app_functions, sales("x", 1))
    bad = [
        ({"limit": "0"}, "limit"),
        ({"limit": "51"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "²"}, "limit"),
        ({"continuation": ""}, "continuation"),
        ({"continuation": "not a token!"}, "continuation"),
        ({"continuation": "two words"}, "continuation"),
        ({"continuation": "x" * 513}, "continuation"),
        ({"continuation": "é"}, "continuation"),
        ({"continuation": "abc"}, "continuation"),  # a storage marker of old: no longer a token this API gives
        ({"continuation": f"{0:013d}-{0:032x}.{'!' * 8}"}, "continuation"),  # the shape, but no base64url
        ({"limt": "5"}, "limt"),
    ]
    for params, named in bad:
        code, body = await listed(app_functions, **params)
        assert code == 400, (params, body)
        assert body["error"]["code"] == "malformed_request"
        assert named in body["error"]["message"], (params, body)


async def test_a_continuation_of_the_right_shape_that_would_restart_the_list_is_a_json_400(configure, app_functions):
    configure(publisher=RecordingPublisher())
    for n in range(3):
        await submit(app_functions, sales(f"r{n}", 1))
    code, first = await listed(app_functions, limit="1")
    assert code == 200
    assert first["continuation"], first
    code, second = await listed(app_functions, limit="1", continuation=first["continuation"])
    assert code == 200
    assert second["batches"][0]["batch_id"] != first["batches"][0]["batch_id"], "the next page"

    # Its marker points back at the start of the index: the listing would not go on after the page it names.
    after, _ = batch_index.decode_token(second["continuation"])
    forged = batch_index.encode_token(after, batch_index.PREFIX)
    code, body = await listed(app_functions, limit="1", continuation=forged)
    assert code == 400, body
    assert "continuation" in body["error"]["message"]


async def test_a_cancelled_batchs_items_in_the_list_add_up_to_its_total_as_in_its_status(configure, app_functions):
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="2")
    accepted = await submit(app_functions, sales("c", 5))
    batch_id = accepted["batch_id"]
    cancel = http_request("POST", f"/api/batches/{batch_id}/cancel", batch_id=batch_id)
    assert (await app_functions["batch_cancel"](cancel)).status_code == 202
    await drain_all(services)  # its chunks are recorded cancelled, unrun

    code, page = await listed(app_functions)
    assert code == 200
    [batch] = page["batches"]
    response = await app_functions["batch_status"](http_request("GET", "/api/batches/x", batch_id=batch_id))
    single = json.loads(response.get_body())
    assert single["items"]["cancelled"] == 5, single
    assert batch["status"] == "ended"
    assert batch["items"] == single["items"], "the list counts every item as the status route does"
    counts = {k: v for k, v in batch["items"].items() if k != "total"}
    assert sum(counts.values()) == batch["items"]["total"]


async def test_a_limit_of_thousands_of_digits_is_a_json_400_not_a_500(configure, app_functions):
    # Python refuses int() of more than 4,300 digits with a ValueError: the length is checked first.
    configure(publisher=RecordingPublisher())
    for digits in ("1" * 4301, "1" + "0" * 5000, "9" * 100):
        code, body = await listed(app_functions, limit=digits)
        assert code == 400, body
        assert "limit" in body["error"]["message"]
    code, body = await listed(app_functions, limit="0" * 5000 + "5")
    assert code == 200, body


async def test_every_integer_parameter_of_thousands_of_digits_is_a_json_400_naming_it_and_stores_nothing(
    configure, app_functions
):
    # Issue 26 item 3, "any integer parameter anywhere": the results' limit answered 500 and a submit's
    # expires_in_s a 400 with Python's own words (int() refuses more than 4,300 digits), found by the simulation.
    configure(publisher=RecordingPublisher())
    batch_id = (await submit(app_functions, sales("r", 3)))["batch_id"]
    for digits in ("1" * 4301, "1" + "0" * 5000):
        request = func.HttpRequest(
            "GET", f"http://localhost:7071/api/batches/{batch_id}/results", params={"limit": digits},
            route_params={"batch_id": batch_id}, body=b"",
        )  # fmt: skip
        response = await app_functions["batch_results"](request)
        body = json.loads(response.get_body())
        assert (response.status_code, "limit" in body["error"]["message"]) == (400, True), body
        headers = {"Content-Type": "application/x-ndjson", "X-Expires-In-S": digits}
        response = await app_functions["submit_batch"](
            http_request("POST", "/api/batches", body=sales("e", 2), headers=headers)
        )
        body = json.loads(response.get_body())
        assert (response.status_code, "expires_in_s" in body["error"]["message"]) == (400, True), body
    code, page = await listed(app_functions)
    assert (code, [b["batch_id"] for b in page["batches"]]) == (200, [batch_id]), "the refused submits stored nothing"


async def test_a_keyed_retry_writes_the_same_index_entry_again(configure, app_functions):
    services = configure(publisher=RecordingPublisher())
    first = await submit(app_functions, sales("k", 3), key="order-7")
    container = services.storage.container(services.settings.batches_container)
    [name] = [b.name async for b in container.list_blobs(name_starts_with=batch_index.PREFIX)]
    await container.delete_blob(name)  # as if the process died between the commit and the index write

    again = await submit(app_functions, sales("k", 3), key="order-7")

    assert again["batch_id"] == first["batch_id"]
    assert [b.name async for b in container.list_blobs(name_starts_with=batch_index.PREFIX)] == [name]
    await submit(app_functions, sales("k", 3), key="order-7")
    code, page = await listed(app_functions)
    assert code == 200
    assert [b["batch_id"] for b in page["batches"]] == [first["batch_id"]], "listed once however often retried"


class Died(BaseException):
    """The instance dies here: nothing after this point of its submit runs (no handler catches a BaseException)."""


def lose_index_writes(monkeypatch: pytest.MonkeyPatch, how: str, times: int = 1) -> list[str]:
    """The fault, injected at the storage boundary (the one fake here; the rest is the real stack on Azurite): the
    next `times` index writes fail, as storage refusing them (`storage fails`) or as the instance dying as it
    makes them (`instance dies`). Returns every index blob written since: names, in order, failed ones too."""
    written: list[str] = []
    upload = BlobClient.upload_blob

    async def upload_blob(self: BlobClient, data: Any, *args: Any, **kwargs: Any) -> Any:
        if self.blob_name.startswith(batch_index.PREFIX):
            written.append(self.blob_name)
            if len(written) <= times:
                if how == "instance dies":
                    raise Died()
                raise ServiceRequestError("connection reset (injected)")
        return await upload(self, data, *args, **kwargs)

    monkeypatch.setattr(BlobClient, "upload_blob", upload_blob)
    return written


@pytest.mark.parametrize("how", ["storage fails", "instance dies"])
async def test_a_batch_whose_index_write_was_lost_after_its_commit_is_listed_once_a_drainer_admits_it(
    configure, app_functions, monkeypatch, how
):
    # The simulation's seeds 81 and 96 (family submit): the manifest was committed (the batch is accepted and is
    # processed) but its index entry never written, and the client never retries; the list must still show it.
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="2")
    written = lose_index_writes(monkeypatch, how)
    body = sales("lost", 5)
    if how == "instance dies":
        with pytest.raises(Died):
            await app_functions["submit_batch"](
                http_request("POST", "/api/batches", body=body, headers={"Content-Type": "application/x-ndjson"})
            )
        services = another_instance(services)  # its memory is gone: another instance drains
    else:
        await submit(app_functions, body)
    batches = services.storage.container(services.settings.batches_container)
    [batch_id] = [b.name.split("/")[0] async for b in batches.list_blobs() if b.name.endswith("/manifest.json")]
    status = await app_functions["batch_status"](http_request("GET", "/api/batches/x", batch_id=batch_id))
    assert json.loads(status.get_body())["status"] == "accepted", "the commit landed: the batch is accepted"
    assert (await listed(app_functions))[1]["batches"] == [], "its index entry was lost"

    await drain_all(services)

    code, page = await listed(app_functions)
    assert code == 200
    assert [(b["batch_id"], b["status"], b["items"]["total"]) for b in page["batches"]] == [
        (batch_id, "completed", 5)
    ], "the drainer that admitted it by its manifest wrote its index entry"
    assert written[1:] == written[:1], "once, under the very name the submit would have written"


@pytest.mark.slow
async def test_a_chunk_whose_batch_the_drainer_could_not_index_is_left_for_redelivery_unhandled(
    configure, app_functions, monkeypatch
):
    # The submit's index write fails, then the drainer's: no chunk of the batch is handled before it is listed.
    from tests.app import handlers

    services = configure(publisher=RecordingPublisher(), HANDLER="tests.app.handlers:record", VISIBILITY_TIMEOUT_S="3")
    written = lose_index_writes(monkeypatch, "storage fails", times=2)
    accepted = await submit(app_functions, sales("late", 3))

    await drain_all(services)
    assert len(written) == 2, "the submit's write and the drainer's, both refused"
    assert not handlers.calls, "left for redelivery, as after a failed manifest read"
    assert (await listed(app_functions))[1]["batches"] == []

    await asyncio.sleep(3.5)  # its visibility timeout
    await drain_all(services)
    assert written[1:] == written[:1] * 2, "the same entry each time"
    assert sorted(handlers.calls.values()) == [1, 1, 1]
    _, page = await listed(app_functions)
    assert [(b["batch_id"], b["status"]) for b in page["batches"]] == [(accepted["batch_id"], "completed")]


async def test_a_drainer_writes_an_index_entry_only_for_a_batch_no_lane_mark_named(
    configure, app_functions, monkeypatch
):
    # A submit names its batch in its lanes' marks only once it is indexed; a drainer that takes a batch from a
    # mark writes nothing, one that admits it by its manifest writes the same entry again (idempotent): one PutBlob.
    services = configure(publisher=RecordingPublisher(), CHUNK_MAX_ITEMS="2")
    written = lose_index_writes(monkeypatch, "storage fails", times=0)
    first = await submit(app_functions, sales("one", 6))
    second = await submit(app_functions, sales("two", 6))  # its mark replaces the first's on their lane
    assert len(written) == 2, "the submits' own writes"

    await drain_all(another_instance(services))

    assert written[2:] == written[:1], "the first batch's entry again, once for its 3 chunks; none for the second"
    code, page = await listed(app_functions)
    assert code == 200
    assert [b["batch_id"] for b in page["batches"]] == [second["batch_id"], first["batch_id"]]
    assert all(b["status"] == "completed" for b in page["batches"])


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


@given(st.lists(st.integers(min_value=0, max_value=batch_index.NEWEST_MS), min_size=2, max_size=20, unique=True))
def test_index_names_sort_newest_first(stamps_ms):
    names = {batch_index.blob_name("ab" * 16, datetime.fromtimestamp(ms / 1000, timezone.utc)): ms for ms in stamps_ms}
    assert [names[n] for n in sorted(names)] == sorted(stamps_ms, reverse=True)


@given(
    st.from_regex(r"\d{13}-[0-9a-f]{32}", fullmatch=True),
    st.from_regex(batch_index.MARKER, fullmatch=True),
    st.sampled_from(["", " ", "\n", "é", "\x00", "~", "=", ".", "A" * 700]),
)
def test_every_token_the_list_gives_is_taken_back_and_no_other_shape(key, marker, stray):
    token = batch_index.encode_token(key, marker)
    assert batch_index.TOKEN.fullmatch(token), "the documented shape"
    assert batch_index.decode_token(token) == (key, marker)
    with pytest.raises(MalformedRequest):
        batch_index.decode_token(token + stray if stray else stray)


def test_the_documented_token_shape_is_the_one_the_api_checks():
    document = json.loads((ROOT / "shared" / "openapi.json").read_text())
    [parameter] = [p for p in document["paths"]["/batches"]["get"]["parameters"] if p["name"] == "continuation"]
    assert parameter["schema"]["pattern"] == f"^{batch_index.TOKEN.pattern}$"


ACCEPTED = datetime(2026, 1, 1, tzinfo=timezone.utc)


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 50), st.integers(1, 60_000)), max_size=12),
    st.integers(1, 600),
)
def test_progress_counts_each_item_once_and_is_complete_exactly_when_nothing_is_pending(records, now_s):
    entries = [
        ResultEntry(chunk, 0, n, ok, failed, 0, ACCEPTED + timedelta(milliseconds=ms), blob=f"b{n}")
        for n, (chunk, ok, failed, ms) in enumerate(records)
    ]
    total = sum(ok + failed for _, ok, failed, _ in records) + 5
    batch = IndexEntry("ab" * 16, total, 4, ACCEPTED.isoformat(), ACCEPTED.isoformat())
    view = batch_progress(batch, entries, ACCEPTED + timedelta(seconds=now_s))
    items = view["items"]
    assert items["succeeded"] + items["failed"] + items["pending"] == total
    assert items["pending"] == 5
    assert view["status"] == ("processing" if entries else "accepted")
    assert view["eta_s"] is None or view["eta_s"] > 0
    if entries:
        assert view["wake_ms"] == min(ms for *_, ms in records)
    done = IndexEntry("ab" * 16, total - 5, 4, ACCEPTED.isoformat(), ACCEPTED.isoformat())
    finished = batch_progress(done, entries, ACCEPTED + timedelta(seconds=now_s))
    if total - 5:
        assert finished["status"].startswith("completed")
        assert finished["eta_s"] == 0
        assert finished["completed_at"] == finished["last_result_at"]


def counts_both_ways(sizes: tuple[int, ...], entries: list[ResultEntry]) -> tuple[dict[str, int], dict[str, int]]:
    """The items the status route and the batch list report for the same records."""
    from shared.batch.batches import Manifest, State
    from shared.ops.status import batch_status

    at = ACCEPTED.isoformat()
    manifest = Manifest("ab" * 16, "a", State.ACCEPTED, sum(sizes), sizes, ("q",), "d", at, accepted_at=at)
    listed = IndexEntry("ab" * 16, sum(sizes), len(sizes), at, at)
    now = ACCEPTED + timedelta(minutes=5)
    return batch_status(manifest, entries)["items"], batch_progress(listed, entries, now)["items"]


def test_an_item_replayed_while_its_original_was_redelivered_and_settled_counts_once_in_both_views():
    later = [ACCEPTED + timedelta(seconds=s) for s in range(4)]
    entries = [
        # Chunk 0 (10 items): item 7 failed for good and was parked; a replay moved it to retrying ...
        ResultEntry(0, 0, 0, ok=9, failed=0, retrying=1, written_at=later[0], attempt=1, blob="r1"),
        # ... and its replayed generation succeeded ...
        ResultEntry(0, 1, 7, ok=1, failed=0, retrying=0, written_at=later[1], attempt=1, blob="r2"),
        # ... then the original, still within its redelivery window, was delivered again and settled all ten.
        ResultEntry(0, 0, 0, ok=10, failed=0, retrying=0, written_at=later[2], attempt=2, blob="r3"),
    ]
    status, listed = counts_both_ways((10,), entries)
    assert status == {"total": 10, "succeeded": 10, "failed": 0, "pending": 0}
    assert listed == status


@given(st.data())
def test_the_batch_list_and_the_status_route_count_every_set_of_records_alike(data):
    sizes = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    entries = []
    for chunk, size in enumerate(sizes):
        held = size
        for gen in range(data.draw(st.integers(1, 3))):
            # A second attempt at a generation (a redelivery) may settle what the first left to the next one.
            carried = []
            for attempt in (1, 2)[: data.draw(st.integers(1, 2))]:
                ok = data.draw(st.integers(0, held))
                failed = data.draw(st.integers(0, held - ok))
                retrying = data.draw(st.integers(0, held - ok - failed))
                at = ACCEPTED + timedelta(seconds=gen * 2 + attempt)
                blob = f"b{chunk}.{gen}.{attempt}"
                entries.append(ResultEntry(chunk, gen, 0, ok, failed, retrying, at, attempt, blob))
                carried.append(retrying)
            held = carried[0]
    status, listed = counts_both_ways(sizes, entries)
    assert listed == status
    assert status["succeeded"] + status["failed"] <= status["total"]


def test_every_status_the_list_shows_is_one_the_openapi_document_names():
    """A cancelled or expired batch is `ended` in the list (its status route says which), one before its start is
    `scheduled`: the document named neither."""
    from shared.api import OPENAPI

    enum = json.loads(Path(OPENAPI).read_text())["components"]["schemas"]["BatchSummary"]["properties"]["status"]
    at = ACCEPTED + timedelta(seconds=1)
    batch = IndexEntry("ab" * 16, 4, 1, ACCEPTED.isoformat(), ACCEPTED.isoformat())
    shown = {
        batch_progress(batch, records, at)["status"]
        for records in (
            [],
            [ResultEntry(0, 0, 0, 1, 0, 3, at, blob="a")],
            [ResultEntry(0, 0, 0, 4, 0, 0, at, blob="b")],
            [ResultEntry(0, 0, 0, 3, 1, 0, at, blob="c")],
            [ResultEntry(0, 0, 0, 1, 0, 0, at, blob="d", cancelled=3)],
            [ResultEntry(0, 0, 0, 0, 0, 0, at, blob="e", expired=4)],
        )
    }
    start = (at + timedelta(hours=1)).isoformat()
    later = IndexEntry("ab" * 16, 4, 1, ACCEPTED.isoformat(), ACCEPTED.isoformat(), start)
    shown.add(batch_progress(later, [], at)["status"])
    assert batch_progress(later, [], at + timedelta(hours=2))["status"] == "accepted", "its start has come"
    assert shown == {"accepted", "scheduled", "processing", "completed", "completed_with_failures", "ended"}
    assert shown <= set(enum["enum"]), shown - set(enum["enum"])
