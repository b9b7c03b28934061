"""A background replay job's start and its batch becoming final, on the real Azurite.

The job blob is written create-only. When the service applies that write and its answer is lost on the way back
(a reset connection), the storage SDK's own retry sends it again and meets the blob its first attempt made: the
409 that follows is this job's own write, not a conflict (lifecycle seed 1 of the simulation answered it 500).
The loss is injected in the SDK's HTTP transport, after the real request reached Azurite.

A job naming a final batch is refused as the foreground replay is; a job whose batch became final after it began
is done at its next step (lifecycle seed 127: each step raised `batch_final`, failing the drain function, and
came back at every claim's end, every 91 s, for as long as the job existed).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import AioHttpTransport

from shared.core.events import Reason
from shared.ops import replay_jobs
from shared.ops.reports import read_batch_status
from tests.app.conftest import RecordingPublisher, http_request
from tests.app.parked import call, final_with_parked, finish, parked, parking, post_replay


def answer_lost_once(monkeypatch: Any, method: str, path_part: str) -> list[str]:
    """The transport sends every request; the first `method` to a URL containing `path_part` reaches the service
    and then raises as a reset connection would, its answer never read. Answers the URLs whose answer was lost."""
    real = AioHttpTransport.send
    lost: list[str] = []

    async def send(transport: AioHttpTransport, request: Any, **kwargs: Any) -> Any:
        response = await real(transport, request, **kwargs)
        if not lost and request.method == method and path_part in request.url:
            lost.append(request.url)
            await response.load_body()
            raise ServiceResponseError("connection reset after the request was sent (test)")
        return response

    monkeypatch.setattr(AioHttpTransport, "send", send)
    return lost


@pytest.mark.slow
async def test_a_background_replay_whose_job_write_lost_its_answer_starts_once(configure, app_functions, monkeypatch):
    publisher = RecordingPublisher()
    services = configure(publisher=publisher)
    lost = answer_lost_once(monkeypatch, "PUT", f"/{replay_jobs.JOBS_PREFIX}")

    body = json.dumps({"all": True, "background": True}).encode()
    code, started = await call(app_functions, "poison_replay", http_request("POST", "/api/poison/replay", body=body))

    assert lost, "the job's write lost its answer"
    assert code == 202, started
    job_id = started["job_id"]
    state = services.storage.container(services.settings.state_container)
    jobs = [b.name async for b in state.list_blobs(name_starts_with=replay_jobs.JOBS_PREFIX)]
    assert jobs == [replay_jobs.job_blob(job_id)], "one job, the one answered"
    assert [(e.reason, e.job) for e, _ in publisher.events] == [(Reason.REPLAY_STEP, job_id)]
    code, status = await call(
        app_functions, "replay_status", http_request("GET", f"/api/poison/replay/{job_id}", job_id=job_id)
    )
    assert (code, status["state"], status["job_id"]) == (200, "running", job_id)


async def job_blobs(services: Any) -> list[str]:
    state = await services.storage.ensure_container(services.settings.state_container)
    return [b.name async for b in state.list_blobs(name_starts_with=replay_jobs.JOBS_PREFIX)]


async def test_a_background_replay_of_a_final_batch_is_refused_and_stores_no_job(configure, app_functions):
    services = parking(configure)
    batch_id = await final_with_parked(services)
    services.publisher.events.clear()

    code, answer = await post_replay(app_functions, {"batch_id": batch_id, "background": True})

    assert (code, answer["error"]["code"]) == (409, "batch_final"), answer
    assert await job_blobs(services) == []
    assert services.publisher.events == [], "no step published"


async def test_a_replay_job_whose_batch_became_final_after_it_began_is_done_at_its_next_step(configure):
    publisher = RecordingPublisher()
    services = parking(configure, publisher=publisher)
    batch_id = await parked(services)  # three chunks parked, one held: still processing
    job = await replay_jobs.start(services, batch_id=batch_id)
    assert (await finish(services, batch_id))["status"] == "completed_with_failures", "final before its step"
    publisher.events.clear()

    done = await replay_jobs.step(services, job.job_id)

    assert done is not None
    assert (done.state, done.replayed) == ("done", 0)
    assert done.finished_at is not None
    assert publisher.events == [], "no next step"
    assert (await replay_jobs.status(services, job.job_id))["state"] == "done"
    assert (await read_batch_status(services, batch_id))["status"] == "completed_with_failures"
