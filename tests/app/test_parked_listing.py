"""Operators list and inspect parked chunks through function_app's routes, and replay requests that are malformed are
refused by name and write nothing (real Azurite)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import azure.functions as func
import pytest

from shared.intake.submit import submit
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.app.held import hold_first_chunk
from tests.app.parked import call, parked, parked_while_processing, parking, post_replay


async def test_parked_chunks_can_be_listed_inspected_and_replayed_once(configure, app_functions):
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="2", CHUNK_MAX_ITEMS="10"
    )
    batch_id, held = await parked_while_processing(services)  # its first chunk is still on its way
    assert (await read_batch_status(services, batch_id))["items"]["failed"] == 3  # r-7, r-17, r-27

    code, listing = await call(app_functions, "poison_list", http_request("GET", "/api/poison"))
    assert code == 200
    [partition] = listing["partitions"]
    assert partition["depth"] == 3
    assert {p["batch_id"] for p in partition["first"]} == {batch_id}
    assert all(p["replayable"] and "sevens are unlucky" in p["reason"] for p in partition["first"])

    message_id = partition["first"][0]["message_id"]
    code, detail = await call(
        app_functions, "poison_detail", http_request("GET", f"/api/poison/{message_id}", message_id=message_id)
    )
    assert code == 200
    assert detail["items"][0]["id"].endswith("7")
    assert detail["failed"] == 1

    # Looking for an id that is not there scans (and briefly hides) every parked chunk: it must leave
    # them visible, or the replay below would find nothing for the next 30 s.
    code, _ = await call(app_functions, "poison_detail", http_request("GET", "/api/poison/x", message_id="nope"))
    assert code == 404

    # The cause is fixed (here: a handler that succeeds); replay everything parked for the batch.
    services.handler = handlers.record
    handlers.calls.clear()
    body = json.dumps({"batch_id": batch_id}).encode()
    code, replayed = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))
    assert code == 200
    assert replayed["replayed"] == 3
    assert ("replay", services.settings.work_queue) in [(e.reason.value, e.queue) for e, _ in publisher.events]

    await held.release()
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed"
    assert status["items"] == {"total": 40, "succeeded": 40, "failed": 0, "pending": 0}
    assert Counter(handlers.calls.values()) == Counter({1: 13}), "the held chunk and the three parked items, once"

    code, again = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))
    assert (code, again["error"]["code"]) == (409, "batch_final"), "a final batch is never replayed"


async def test_inspecting_an_unknown_parked_chunk_is_a_json_404(configure, app_functions):
    configure()
    code, body = await call(app_functions, "poison_detail", http_request("GET", "/api/poison/x", message_id="nope"))
    assert code == 404
    assert body["error"]["code"] == "not_found"


async def test_a_malformed_replay_request_is_refused_by_name(configure, app_functions):
    configure()
    for bad, says in [(b"[1]", "optional"), (b'{"limit": 0}', "limit"), (b'{"message_ids": "x"}', "message_ids")]:
        code, body = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=bad))
        assert code == 400
        assert says in body["error"]["message"]


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
async def test_a_deeply_nested_replay_body_is_a_json_400_naming_the_depth_limit(configure, app_functions, depth):
    """The submit route's depth limit, for every route that reads a body: never a RecursionError and a 500."""
    configure()
    nested = b'{"batch_id": ' + b"[" * depth + b"]" * depth + b"}"
    code, body = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=nested))
    assert code == 400, body
    assert body["error"]["limit"] == "MAX_JSON_DEPTH"


async def test_an_oversized_replay_body_is_a_413(configure, app_functions):
    configure()
    huge = json.dumps({"message_ids": ["x" * 1100] * 1000}).encode()
    code, body = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=huge))
    assert code == 413, body
    assert body["error"]["code"] == "limit_exceeded"


@pytest.mark.slow
async def test_inspecting_parked_chunks_hides_nothing_costs_a_few_calls_and_replay_finds_them_all(configure):
    """39 parked chunks: looking one up (known, beyond the first page, or unknown) costs a few storage calls
    and leaves every message visible; a replay of the batch that runs while others inspect finds all 39."""
    import asyncio

    from shared.core.errors import NotFound
    from shared.ops import parked as parked_tools
    from shared.ops import replay
    from shared.store import poison_index
    from shared.telemetry import metering

    services = configure(publisher=RecordingPublisher(), HANDLER="tests.app.handlers:mixed", CHUNK_MAX_ITEMS="1")
    ids = [f"perm-{i}" for i in range(40)]
    done = await submit(
        services,
        "\n".join(json.dumps({"id": i}) for i in ids).encode(),
        content_type="application/x-ndjson",
        content_encoding=None,
        idempotency_key=None,
    )
    await hold_first_chunk(services)  # the batch is not final: its parked chunks can be replayed
    await drain_all(services)
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    assert len(await poison.peek_messages(max_messages=32)) == 32
    state = services.storage.container(services.settings.state_container)
    entries = await poison_index.find(state, poison.queue_name, batch_id=None, message_ids=None, limit=100)
    assert len(entries) == 39

    with metering.tally() as calls:
        with pytest.raises(NotFound):
            await parked_tools.inspect(services, "00000000-0000-0000-0000-000000000000")
        detail = await parked_tools.inspect(services, entries[-1].message_id)
    assert detail["batch_id"] == done.manifest.batch_id
    assert sum(calls.values()) <= 6, calls
    assert len(await poison.peek_messages(max_messages=32)) == 32, "looking hid nothing"

    async def inspect_unknown() -> None:
        with pytest.raises(NotFound):
            await parked_tools.inspect(services, "11111111-0000-0000-0000-000000000000")

    answer, *_ = await asyncio.gather(
        replay.replay(services, batch_id=done.manifest.batch_id), inspect_unknown(), inspect_unknown()
    )
    assert answer["replayed"] == 39
    assert (await poison.get_queue_properties()).approximate_message_count == 0


async def test_a_replay_with_a_malformed_batch_id_or_a_null_background_is_refused_and_stores_no_job(
    configure, app_functions
):
    services = configure(publisher=RecordingPublisher())
    for doc, named in (
        ({"batch_id": "../../x", "background": True}, "batch_id"),
        ({"batch_id": "A" * 32}, "batch_id"),
        ({"message_ids": ["../x"]}, "message_ids"),
        ({"background": None}, "background"),
        ({"rate": None, "background": None}, "rate"),
    ):
        code, body = await post_replay(app_functions, doc)
        assert code == 400, (doc, body)
        assert named in body["error"]["message"], (doc, body)
    state = await services.storage.ensure_container(services.settings.state_container)
    assert [b.name async for b in state.list_blobs(name_starts_with="replays/")] == []


async def test_the_parked_listing_pages_through_every_parked_chunk_newest_first(configure, app_functions):
    services = parking(configure, chunk_max_items=1)
    batch_id = await parked(services)

    async def page(**params: str) -> tuple[int, Any]:
        request = func.HttpRequest("GET", "http://localhost:7071/api/poison", params=params, body=b"")
        return await call(app_functions, "poison_list", request)

    code, first = await page(limit="2")
    assert code == 200, first
    assert len(first["parked"]) == 2
    assert first["continuation"]
    code, second = await page(limit="2", continuation=first["continuation"])
    assert (code, len(second["parked"]), second["continuation"]) == (200, 1, None), second
    shown = first["parked"] + second["parked"]
    assert {p["batch_id"] for p in shown} == {batch_id}
    assert len({p["message_id"] for p in shown}) == 3
    times = [p["inserted_on"] for p in shown]
    assert times == sorted(times, reverse=True), "newest first"
    for bad in ({"limit": "0"}, {"limit": "1" * 4400}, {"continuation": "x"}, {"limt": "2"}):
        code, refused = await page(**bad)
        assert code == 400, (bad, refused)


async def test_a_replay_that_names_nothing_or_a_null_is_a_400_and_replays_nothing(configure, app_functions):
    """Issue 36 item 15: an empty body, `{}` or a null never widens a replay to every parked chunk of every
    tenant; replaying everything takes `"all": true`, alone."""
    services = parking(configure)
    batch_id = await parked(services)
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    for body, named in (
        (b"", "name what to replay"),
        (b"  ", "name what to replay"),
        (b"{}", "name what to replay"),
        (b'{"batch_id": null}', '"batch_id" must not be null'),
        (b'{"message_ids": null}', '"message_ids" must not be null'),
        (b'{"all": null}', '"all" must not be null'),
        (b'{"all": false}', '"all" must be true'),
        (b'{"limit": 5}', "name what to replay"),
        (b'{"batch_id": null, "limit": null}', '"batch_id" must not be null'),
        (json.dumps({"all": True, "batch_id": batch_id}).encode(), "cannot be combined"),
    ):
        request = http_request("POST", "/api/poison/replay", body=body)
        code, answer = await call(app_functions, "poison_replay", request)
        assert code == 400, (body, answer)
        assert answer["error"]["code"] == "malformed_request"
        assert named in answer["error"]["message"], (body, answer)
    assert (await poison.get_queue_properties()).approximate_message_count == 3, "nothing was replayed"
    code, answer = await post_replay(app_functions, {"all": True})
    assert (code, answer["replayed"]) == (200, 3), answer
