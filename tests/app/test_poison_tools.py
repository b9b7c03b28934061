"""Operators list, inspect and replay parked chunks through function_app's routes (real Azurite)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import azure.functions as func
import pytest
from azure.storage.queue.aio import QueueClient

from shared.core import layout
from shared.intake.submit import submit
from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.app.held import Held, hold_first_chunk

SALES = "\n".join(
    json.dumps({"id": f"r-{i}", "amount": "2.50", "currency": "EUR", "author": "a", "distributor": "d"})
    for i in range(30)
).encode()
# Ten sales that never fail, before the 30: the chunk a test holds back (`parked_while_processing`).
LEAD = "\n".join(
    json.dumps({"id": f"lead-{i}-x", "amount": "1.00", "currency": "EUR", "author": "a", "distributor": "d"})
    for i in range(10)
).encode()


async def call(app_functions: Any, name: str, request: Any) -> tuple[int, Any]:
    response = await app_functions[name](request)
    return response.status_code, json.loads(response.get_body())


async def parked_while_processing(services: Any) -> tuple[str, Held]:
    """Submit the ten lead sales and the 30, hold the first chunk (of lead sales, with CHUNK_MAX_ITEMS at most 10)
    and drain the rest: with the test's failing handler, r-7, r-17 and r-27 are parked while the batch is still
    `processing`. Answers the batch id and the held chunk."""
    done = await submit(
        services, LEAD + b"\n" + SALES, content_type="application/x-ndjson", content_encoding=None,
        idempotency_key=None,
    )  # fmt: skip
    held = await hold_first_chunk(services)
    await drain_all(services)
    assert (await read_batch_status(services, done.manifest.batch_id))["status"] == "processing"
    return str(done.manifest.batch_id), held


HELD: dict[str, Held] = {}


async def parked(services: Any) -> str:
    """`parked_while_processing`, answering the batch id (its held chunk is `HELD[batch_id]`)."""
    batch_id, HELD[batch_id] = await parked_while_processing(services)
    return batch_id


async def finish(services: Any, batch_id: str) -> dict[str, Any]:
    """Release the batch's held chunk, drain, and answer its status."""
    await HELD.pop(batch_id).release()
    await drain_all(services)
    return await read_batch_status(services, batch_id)


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


async def test_a_paced_replay_spaces_its_chunks_and_takes_what_its_pace_allows_in_a_minute(configure, app_functions):
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:fail_sevens",
        MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="10",
    )
    batch_id, _ = await parked_while_processing(services)
    assert (await read_batch_status(services, batch_id))["items"]["failed"] == 3

    for bad in (0, -1, "fast", True, 1001):
        body = json.dumps({"rate": bad, "batch_id": batch_id}).encode()
        code, _ = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))
        assert code == 400, bad

    paced = json.dumps({"batch_id": batch_id, "rate": 4, "limit": 10}).encode()
    code, replayed = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=paced))
    assert code == 200, replayed
    assert replayed["replayed"] == 3
    assert replayed["rate"] == 4.0
    assert replayed["seconds"] >= 2 / 4, "three chunks at 4 per second: the third starts 0.5 s after the first"

    # A pace too slow for one answer takes what it allows in 60 s (here one chunk) and says so.
    await drain_all(services)  # the three fail again (the handler still fails sevens) and are parked again
    slow = json.dumps({"all": True, "rate": 0.01}).encode()
    code, some = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=slow))
    assert (code, some["replayed"], some["limit"]) == (200, 1, 1), some


async def test_a_background_replay_runs_in_paced_steps_with_its_progress_in_its_status(
    configure, app_functions, monkeypatch
):
    from shared.core.events import Reason
    from shared.ops import replay_jobs
    from shared.router import route

    monkeypatch.setattr(replay_jobs, "STEP_S", 0.5)  # at 2 chunks/s: 2 chunks a step, so 3 take two steps
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1", CHUNK_MAX_ITEMS="1"
    )
    batch_id = await parked(services)
    assert (await read_batch_status(services, batch_id))["items"]["failed"] == 3

    bad = json.dumps({"background": "yes"}).encode()
    code, refused = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=bad))
    assert code == 400, refused
    assert "background" in refused["error"]["message"]

    services.handler = handlers.record  # the cause is fixed
    body = json.dumps({"batch_id": batch_id, "rate": 2, "background": True}).encode()
    response = await app_functions["poison_replay"](http_request("POST", "/api/poison/replay", body=body))
    started = json.loads(response.get_body())
    assert response.status_code == 202, started
    job_id = started["job_id"]
    assert response.headers["Location"] == f"/api/poison/replay/{job_id}"
    assert (started["state"], started["replayed"], started["steps"]) == ("running", 0, 0)

    def steps_published() -> list[Any]:
        return [e for e, _ in publisher.events if e.reason is Reason.REPLAY_STEP and e.job == job_id]

    served = 0
    while served < len(steps_published()):  # what the drain function does with each step event
        report = await route(services, steps_published()[served])
        assert report.outcome == "replay-step"
        served += 1
        code, status = await call(
            app_functions, "replay_status", http_request("GET", f"/api/poison/replay/{job_id}", job_id=job_id)
        )
        assert code == 200
        if served == 1:
            assert (status["state"], status["replayed"], status["steps"]) == ("running", 2, 1), status
    assert (status["state"], status["replayed"], status["skipped"], status["steps"]) == ("done", 3, 0, 2), status
    assert status["finished_at"] is not None
    assert served == 2, "no step is published after the job is done"
    after = await finish(services, batch_id)
    assert after["items"] == {"total": 40, "succeeded": 40, "failed": 0, "pending": 0}


async def test_a_background_replay_whose_step_event_was_lost_is_published_again_when_its_status_is_read(
    configure, app_functions
):
    from shared.core.events import Reason
    from shared.ops import replay_jobs
    from shared.store.storage import read_json, write_json

    publisher = RecordingPublisher(down=True)
    services = configure(publisher=publisher)
    job = await replay_jobs.start(services, rate=1.0)  # Service Bus is down: the job stands, its step is lost
    assert publisher.events == []
    publisher.down = False
    state = services.storage.container(services.settings.state_container)
    path = replay_jobs.job_blob(job.job_id)
    code, status = await call(
        app_functions, "replay_status", http_request("GET", f"/api/poison/replay/{job.job_id}", job_id=job.job_id)
    )
    assert (code, status["state"]) == (200, "running")
    assert publisher.events == [], "not stalled yet: no second step"
    doc, etag = await read_json(state, path)
    doc["updated_at"] = "2020-01-01T00:00:00+00:00"
    await write_json(state, path, doc, etag=etag)
    await call(
        app_functions, "replay_status", http_request("GET", f"/api/poison/replay/{job.job_id}", job_id=job.job_id)
    )
    assert [(e.reason, e.job) for e, _ in publisher.events] == [(Reason.REPLAY_STEP, job.job_id)]
    code, missing = await call(
        app_functions, "replay_status", http_request("GET", "/api/poison/replay/0123", job_id="0123")
    )
    assert code == 404, missing


@pytest.mark.slow
async def test_a_replay_that_meets_service_bus_down_rings_its_doorbell_and_arms_its_look_once_it_answers(
    configure, app_functions
):
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1", CHUNK_MAX_ITEMS="10"
    )
    batch_id = await parked(services)
    services.handler = handlers.record
    publisher.events.clear()
    container = await services.storage.ensure_container(services.settings.state_container)
    await container.delete_blob(layout.look_blob(services.settings.work_queue))  # its submit's chain has ended
    publisher.down = True

    body = json.dumps({"batch_id": batch_id}).encode()
    code, replayed = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))
    assert (code, replayed["replayed"]) == (200, 3)
    assert services.deferred.pending() == [services.settings.work_queue], "this process keeps the doorbell"
    publisher.down = False

    for _ in range(100):
        if len(publisher.events) == 2:
            break
        await asyncio.sleep(0.1)
    assert publisher.reasons() == ["replay", "look"]
    assert (await finish(services, batch_id))["status"] == "completed"


async def post_replay(app_functions: Any, doc: dict[str, Any]) -> tuple[int, Any]:
    body = json.dumps(doc).encode()
    return await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))


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


async def test_an_unpaced_replay_stops_at_its_time_bound_and_says_there_is_more(configure, app_functions, monkeypatch):
    from shared.ops import replay

    monkeypatch.setattr(replay, "MAX_REPLAY_S", 0.0)  # every call takes one chunk, then its time is up
    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:fail_sevens",
        MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="1",
    )
    batch_id = await parked(services)
    answers = []
    for _ in range(4):
        code, answer = await post_replay(app_functions, {"batch_id": batch_id})
        assert code == 200, answer
        answers.append((answer["replayed"], answer["more"]))
    assert answers == [(1, True), (1, True), (1, False), (0, False)], answers


def failing(monkeypatch: Any, target: Any, name: str, after: int) -> None:
    """Storage fails at `target.name` from its call number `after` on (a fault injected where no real outage
    can be timed this finely; the tests in tests/faults take Azurite down for real)."""
    from shared.core.errors import StorageUnavailable

    real = getattr(target, name)
    calls = {"n": 0}

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > after:
            raise StorageUnavailable(name, "storage is down (injected)")
        return await real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapper)


@pytest.mark.parametrize("where", ["mark-after", "second-chunk"])
async def test_a_replay_that_fails_part_way_has_already_rung_for_the_chunks_it_put_back(
    configure, app_functions, monkeypatch, where
):
    from shared.engine import lane_queues
    from shared.ops import replay_marks

    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1", CHUNK_MAX_ITEMS="1"
    )
    batch_id = await parked(services)
    container = await services.storage.ensure_container(services.settings.state_container)
    await container.delete_blob(layout.look_blob(services.settings.work_queue))  # its submit's chain has ended
    publisher.events.clear()
    if where == "mark-after":
        failing(monkeypatch, lane_queues, "mark", after=1)  # the mark before the chunk goes back works
    else:
        failing(monkeypatch, replay_marks, "list_entries", after=1)
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    work = services.storage.queue(services.settings.work_queue)
    assert (await work.get_queue_properties()).approximate_message_count >= 1, "a chunk went back"
    assert publisher.reasons() == ["replay", "look"], (code, answer, publisher.reasons())


@pytest.mark.parametrize("where", ["lane-mark", "send", "killed"])
async def test_a_replay_that_fails_part_way_leaves_a_state_a_later_replay_completes(
    configure, app_functions, monkeypatch, where
):
    """Issue 36 item 1. A replay claims a parked chunk by marking its items retrying in the parent record, then
    marks the lane and sends the chunk. When the lane's mark or the send fails, the claim is taken back (the items
    are failed again, with their reasons); when the replay dies after its claim (here: the take-back fails too),
    a later replay takes the claim over once it is CLAIM_S old. Either way the batch reads as it did, and a later
    replay completes it: no chunk is left counted pending with nothing to carry it."""
    from shared.engine import lane_queues

    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1", CHUNK_MAX_ITEMS="1"
    )
    batch_id = await parked(services)
    before = await read_batch_status(services, batch_id)
    assert before["items"] == {"total": 40, "succeeded": 36, "failed": 3, "pending": 1}, before
    lines = await export(app_functions, batch_id)
    publisher.events.clear()
    services.handler = handlers.record  # the cause is fixed
    if where == "send":
        failing(monkeypatch, lane_queues, "mark", after=1)  # the lane's mark works; the send below does not
        monkeypatch.setattr(QueueClient, "send_message", refused_send)
    else:
        failing(monkeypatch, lane_queues, "mark", after=0)
    if where == "killed":
        from shared.ops import replay_marks

        failing(monkeypatch, replay_marks, "write_json", after=1)  # the claim is written, its take-back is not
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert code == 503, answer
    work = services.storage.queue(services.settings.work_queue)
    assert (await work.get_queue_properties()).approximate_message_count == 1, "nothing went back (one held)"
    monkeypatch.undo()
    if where == "killed":
        assert (await read_batch_status(services, batch_id))["items"]["pending"] == 2, "a claim left behind"
        code, answer = await post_replay(app_functions, {"batch_id": batch_id})
        assert (code, answer["replayed"]) == (200, 2), "a replay leaves a fresh claim alone"
        monkeypatch.setattr(replay_marks, "CLAIM_S", 0)  # time passes
    else:
        assert (await read_batch_status(services, batch_id))["items"] == before["items"], "it reads as before"
        assert await export(app_functions, batch_id) == lines, "the failures' reasons are back"
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"]) == (200, 1 if where == "killed" else 3), answer
    status = await finish(services, batch_id)
    assert status["status"] == "completed", status
    assert status["items"] == {"total": 40, "succeeded": 40, "failed": 0, "pending": 0}, status


async def test_a_takeover_carries_the_parked_items_not_a_follow_up_of_the_same_generation(
    configure, app_functions, monkeypatch
):
    """Issue 36 item 1's takeover. A chunk whose attempt parks one item (failed for good) and leaves another
    retrying sends two chunks of the next generation: the parked copy and the follow-up. A replay that dies after
    its claim leaves the parked item retrying under its claim; the follow-up's record, of the same generation,
    does not carry it, so a later replay takes the claim over instead of deleting the parked copy as stale."""
    from shared.engine import lane_queues
    from shared.ops import replay_marks

    publisher = RecordingPublisher()
    services = configure(publisher=publisher, HANDLER="tests.app.handlers:mixed_once", CHUNK_MAX_ITEMS="5")
    ids = [f"lead-{i}" for i in range(5)] + ["ok-5", "trans-6", "ok-7", "perm-8", "ok-9"]
    done = await submit(
        services, "\n".join(json.dumps({"id": i}) for i in ids).encode(), content_type="application/x-ndjson",
        content_encoding=None, idempotency_key=None,
    )  # fmt: skip
    batch_id = str(done.manifest.batch_id)
    held = await hold_first_chunk(services)  # the batch is not final: its parked chunk can be replayed
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["items"] == {"total": 10, "succeeded": 4, "failed": 1, "pending": 5}, status  # trans-6 settled
    services.handler = handlers.record  # the cause is fixed
    failing(monkeypatch, lane_queues, "mark", after=0)  # the replay fails after its claim...
    failing(monkeypatch, replay_marks, "write_json", after=1)  # ...and cannot take it back: it died there
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert code == 503, answer
    monkeypatch.undo()
    assert (await read_batch_status(services, batch_id))["items"]["pending"] == 6, "a claim left behind"
    monkeypatch.setattr(replay_marks, "CLAIM_S", 0)  # time passes
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"]) == (200, 1), answer
    await held.release()
    await drain_all(services)
    status = await read_batch_status(services, batch_id)
    assert status["status"] == "completed", status
    assert status["items"] == {"total": 10, "succeeded": 10, "failed": 0, "pending": 0}, status


async def refused_send(*args: Any, **kwargs: Any) -> Any:
    """A queue's send that fails (a re-enqueue that storage refuses)."""
    from shared.core.errors import StorageUnavailable

    raise StorageUnavailable("send_message", "storage is down (injected)")


async def test_a_background_step_is_sized_by_time_not_by_count(configure, monkeypatch):
    from shared.core.events import Reason
    from shared.ops import replay_jobs
    from shared.router import route

    monkeypatch.setattr(replay_jobs, "STEP_S", 0.0)  # each step's time is up after its first chunk
    publisher = RecordingPublisher()
    services = configure(
        publisher=publisher, HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1", CHUNK_MAX_ITEMS="1"
    )
    batch_id = await parked(services)
    job = await replay_jobs.start(services, batch_id=batch_id)  # no rate
    served = 0
    while served < len(steps := [e for e, _ in publisher.events if e.reason is Reason.REPLAY_STEP]):
        assert (await route(services, steps[served])).outcome == "replay-step"
        served += 1
    view, _ = await replay_jobs.read(services, job.job_id)
    assert (view.state, view.replayed, view.steps) == ("done", 3, 3), view


async def test_a_redelivered_step_that_finds_its_job_held_schedules_a_step_for_when_the_hold_lapses(configure):
    from shared.core.events import Reason
    from shared.ops import replay_jobs
    from shared.router import route
    from shared.store.storage import read_json, write_json

    publisher = RecordingPublisher()
    services = configure(publisher=publisher)
    job = await replay_jobs.start(services, rate=1.0)
    [(first, _)] = publisher.events
    # The step's instance died mid-step: its claim stands, nothing else moves the job.
    state = services.storage.container(services.settings.state_container)
    doc, etag = await read_json(state, replay_jobs.job_blob(job.job_id))
    held_until = doc["step_until"] = 4_000_000_000.0
    await write_json(state, replay_jobs.job_blob(job.job_id), doc, etag=etag)

    report = await route(services, first)  # Service Bus delivers the step again
    assert report.outcome == "replay-step-skipped"
    [(again, at)] = publisher.events[1:]
    assert (again.reason, again.job) == (Reason.REPLAY_STEP, job.job_id)
    assert at is not None
    assert at.timestamp() == held_until + 1


async def test_finished_replay_jobs_are_deleted_a_week_after_they_finished(configure):
    from shared.ops import replay_jobs

    services = configure(publisher=RecordingPublisher())
    old = await replay_jobs.start(services, batch_id="0" * 32)
    await replay_jobs.step(services, old.job_id)  # nothing matches: done at once
    running = await replay_jobs.start(services, batch_id="1" * 32)
    state = services.storage.container(services.settings.state_container)
    assert await replay_jobs.sweep(state, time.time()) == 0, "a job finished just now is kept"
    assert await replay_jobs.sweep(state, time.time() + replay_jobs.KEEP_DONE_S + 60) == 1
    names = [b.name async for b in state.list_blobs(name_starts_with="replays/")]
    assert names == [replay_jobs.job_blob(running.job_id)]


async def test_a_stale_parked_copy_whose_items_a_later_attempt_settled_is_deleted(configure, app_functions):
    from shared.store import poison_index

    services = configure(
        publisher=RecordingPublisher(),
        HANDLER="tests.app.handlers:fail_sevens",
        MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="10",
    )
    batch_id = await parked(services)
    poison_name = services.settings.poison_queue(services.settings.work_queue)
    state = services.storage.container(services.settings.state_container)
    copies = await poison_index.find(state, poison_name, batch_id=batch_id, message_ids=None, limit=10)
    services.handler = handlers.record  # the cause is fixed: replay, and the replayed chunks succeed
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"]) == (200, 3), answer
    await drain_all(services)
    assert (await read_batch_status(services, batch_id))["items"]["succeeded"] == 30, "all but the held chunk"
    # The same chunks parked twice (a redelivery's second park): copies whose items are settled now.
    poison = services.storage.queue(poison_name)
    for entry in copies:
        sent = await poison.send_message(entry.text)
        await poison_index.add(
            state, poison_index.Entry(poison_name, sent.id, sent.pop_receipt, None, batch_id, entry.text)
        )
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["replayed"], len(answer["skipped"])) == (200, 0, 3), answer
    assert all("deleted" in s["why"] for s in answer["skipped"]), answer
    assert (await poison.get_queue_properties()).approximate_message_count == 0
    assert await poison_index.find(state, poison_name, batch_id=batch_id, message_ids=None, limit=10) == []
    assert (await finish(services, batch_id))["items"]["succeeded"] == 40


async def test_a_limited_replay_takes_the_oldest_parked_chunks_whatever_their_message_ids(configure):
    from shared.store import poison_index

    services = configure(publisher=RecordingPublisher())
    name = services.settings.poison_queue(services.settings.work_queue)
    state = await services.storage.ensure_container(services.settings.state_container)
    for message_id in ("f" * 8, "0" * 8, "8" * 8):  # parked in this order; message-id order is another
        await poison_index.add(state, poison_index.Entry(name, message_id, "r", None, None, "x"))
        await asyncio.sleep(0.002)
    oldest = await poison_index.find(state, name, batch_id=None, message_ids=None, limit=2)
    assert [e.message_id for e in oldest] == ["f" * 8, "0" * 8]


async def test_the_parked_listing_pages_through_every_parked_chunk_newest_first(configure, app_functions):
    services = configure(
        publisher=RecordingPublisher(), HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="1",
    )  # fmt: skip
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


async def final_with_parked(services: Any) -> str:
    """The 30 sales, drained: r-7, r-17 and r-27 parked and the batch final (`completed_with_failures`)."""
    done = await submit(
        services, SALES, content_type="application/x-ndjson", content_encoding=None, idempotency_key=None
    )
    await drain_all(services)
    return str(done.manifest.batch_id)


def outcome(status: dict[str, Any]) -> tuple[Any, ...]:
    return status["status"], status["items"], status["chunks"], status["completed_at"]


async def export(app_functions: Any, batch_id: str) -> list[Any]:
    request = http_request("GET", f"/api/batches/{batch_id}/results", batch_id=batch_id)
    response = await app_functions["batch_results"](request)
    assert response.status_code == 200
    return [json.loads(line) for line in response.get_body().splitlines()]


async def test_a_replay_of_a_final_batch_is_refused_and_changes_nothing(configure, app_functions):
    """Issue 36 item 12: a final batch's outcome never changes, so a replay naming it is a 409 `batch_final`;
    its status, export and parked chunks stay what they were, and nothing goes back on the work queue."""
    services = configure(
        publisher=RecordingPublisher(), HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="10",
    )  # fmt: skip
    batch_id = await final_with_parked(services)
    before = await read_batch_status(services, batch_id)
    assert before["status"] == "completed_with_failures"
    lines = await export(app_functions, batch_id)
    services.handler = handlers.record  # the cause is fixed, but the batch's outcome was reported
    code, answer = await post_replay(app_functions, {"batch_id": batch_id})
    assert (code, answer["error"]["code"]) == (409, "batch_final"), answer
    assert "new batch" in answer["error"]["message"]
    await drain_all(services)
    assert outcome(await read_batch_status(services, batch_id)) == outcome(before)
    assert await export(app_functions, batch_id) == lines
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    assert (await poison.get_queue_properties()).approximate_message_count == 3, "still parked, for inspection"


async def test_a_replay_of_everything_sets_aside_ended_and_final_batches_chunks_without_spending_its_limit(
    configure, app_functions
):
    """Issue 36 items 5 and 12: the oldest parked chunks are those of a cancelled batch and of a final one; a
    replay of everything with `limit: 1` sets them aside (out of the poison queue, still inspectable) and
    replays the oldest chunk of a batch still processing, instead of answering `replayed 0, more true` forever."""
    from shared.ops import lifecycle

    services = configure(
        publisher=RecordingPublisher(), HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="10",
    )  # fmt: skip
    cancelled = await parked(services)
    await lifecycle.cancel(services, cancelled)
    final = await final_with_parked(services)
    open_id = await parked(services)
    statuses = {b: outcome(await read_batch_status(services, b)) for b in (cancelled, final)}
    poison = services.storage.queue(services.settings.poison_queue(services.settings.work_queue))
    assert (await poison.get_queue_properties()).approximate_message_count == 9
    first_final = next(m for m in await poison.peek_messages(max_messages=32) if final in m.content).id

    code, answer = await post_replay(app_functions, {"all": True, "limit": 1})
    assert code == 200, answer
    assert (answer["replayed"], answer["set_aside"], answer["more"]) == (1, 6, True), answer
    assert {c["batch_id"] for c in answer["chunks"]} == {open_id}
    assert (await poison.get_queue_properties()).approximate_message_count == 2
    code, answer = await post_replay(app_functions, {"all": True})
    assert (code, answer["replayed"], answer["set_aside"], answer["more"]) == (200, 2, 0, False), answer
    assert (await poison.get_queue_properties()).approximate_message_count == 0, "poison depth back to 0"
    for batch_id, status in statuses.items():
        assert outcome(await read_batch_status(services, batch_id)) == status, "a set-aside chunk changes nothing"
    code, kept = await call(
        app_functions, "poison_detail", http_request("GET", f"/api/poison/{first_final}", message_id=first_final)
    )
    assert code == 200, kept
    assert (kept["batch_id"], kept["replayable"]) == (final, False)
    assert "final" in kept["set_aside"], kept
    services.handler = handlers.record
    assert (await finish(services, open_id))["status"] == "completed"


async def test_a_replay_that_names_nothing_or_a_null_is_a_400_and_replays_nothing(configure, app_functions):
    """Issue 36 item 15: an empty body, `{}` or a null never widens a replay to every parked chunk of every
    tenant; replaying everything takes `"all": true`, alone."""
    services = configure(
        publisher=RecordingPublisher(), HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="10",
    )  # fmt: skip
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


async def test_a_replay_past_its_time_bound_reads_no_parked_entry_it_does_not_take(configure, monkeypatch):
    # Issue 26 item 2, found by the simulation: the replay read every entry it might take (up to its limit, 1,000
    # by default, one request each) before it looked at its clock, so with storage answering seconds late a step
    # of a background job outlived its claim, and a large synchronous replay its time bound, on reads alone.
    from shared.ops import replay
    from shared.store import poison_index

    services = configure(
        publisher=RecordingPublisher(), HANDLER="tests.app.handlers:fail_sevens", MAX_DEQUEUE_COUNT="1",
        CHUNK_MAX_ITEMS="10",
    )  # fmt: skip
    batch_id = await parked(services)
    read = poison_index.get
    reads: list[str] = []

    async def counted(container: Any, poison_queue: str, message_id: str) -> Any:
        reads.append(message_id)
        return await read(container, poison_queue, message_id)

    monkeypatch.setattr(poison_index, "get", counted)
    answer = await replay.replay(services, window_s=0.0)  # its time is up after the first chunk it takes
    assert (answer["replayed"], answer["more"]) == (1, True), answer
    assert len(reads) == 1, f"read {len(reads)} parked entries to take one"
    answer = await replay.replay(services, batch_id=batch_id)
    assert (answer["replayed"], answer["more"]) == (2, False), answer
    assert (await finish(services, batch_id))["items"]["succeeded"] == 40 - 3


def test_a_replay_stops_taking_chunks_once_one_like_its_longest_would_end_past_its_window():
    # Found by the simulation: with every storage request seconds late, a background step stopped taking chunks at
    # its 60 s but its last one (and its progress write) ended 37 s later, past its claim (60 s + 30 s).
    from shared.ops.replay import Window

    now = [100.0]
    window = Window(60.0, clock=lambda: now[0])
    assert not window.closed(taken=False), "the first chunk is always taken"
    for at in (110.0, 125.0, 135.0):  # chunks of 10, 15 and 10 s: the longest 15 s
        now[0] = at
        assert not window.closed(taken=True), at
    now[0] = 146.0  # 14 s left: one like the longest (15 s) would end past the window
    assert window.closed(taken=True)
    late = Window(60.0, clock=lambda: now[0])
    now[0] = 400.0
    assert not late.closed(taken=False), "past its window, it still takes one chunk"
    assert late.closed(taken=True)
