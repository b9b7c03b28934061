"""A replay's pace and time bound: paced replays, background replays in steps sized by time with their progress in their
status, a lost or held step, and the job's record deleted a week after it finished (real Azurite)."""

from __future__ import annotations

import json
import time
from typing import Any

from shared.ops.reports import read_batch_status
from tests.app import handlers
from tests.app.conftest import RecordingPublisher, drain_all, http_request
from tests.app.parked import call, finish, parked, parked_while_processing, parking, post_replay


async def test_a_paced_replay_spaces_its_chunks_and_takes_what_its_pace_allows_in_a_minute(configure, app_functions):
    services = parking(configure)
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
    services = parking(configure, chunk_max_items=1, publisher=publisher)
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


async def test_an_unpaced_replay_stops_at_its_time_bound_and_says_there_is_more(configure, app_functions, monkeypatch):
    from shared.ops import replay

    monkeypatch.setattr(replay, "MAX_REPLAY_S", 0.0)  # every call takes one chunk, then its time is up
    services = parking(configure, chunk_max_items=1)
    batch_id = await parked(services)
    answers = []
    for _ in range(4):
        code, answer = await post_replay(app_functions, {"batch_id": batch_id})
        assert code == 200, answer
        answers.append((answer["replayed"], answer["more"]))
    assert answers == [(1, True), (1, True), (1, False), (0, False)], answers


async def test_a_background_step_is_sized_by_time_not_by_count(configure, monkeypatch):
    from shared.core.events import Reason
    from shared.ops import replay_jobs
    from shared.router import route

    monkeypatch.setattr(replay_jobs, "STEP_S", 0.0)  # each step's time is up after its first chunk
    publisher = RecordingPublisher()
    services = parking(configure, chunk_max_items=1, publisher=publisher)
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


async def test_a_replay_past_its_time_bound_reads_no_parked_entry_it_does_not_take(configure, monkeypatch):
    # Issue 26 item 2, found by the simulation: the replay read every entry it might take (up to its limit, 1,000
    # by default, one request each) before it looked at its clock, so with storage answering seconds late a step
    # of a background job outlived its claim, and a large synchronous replay its time bound, on reads alone.
    from shared.ops import replay
    from shared.store import poison_index

    services = parking(configure)
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
