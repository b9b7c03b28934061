"""A background replay job's first write, whose answer is lost, on the real Azurite.

The job blob is written create-only. When the service applies that write and its answer is lost on the way back
(a reset connection), the storage SDK's own retry sends it again and meets the blob its first attempt made: the
409 that follows is this job's own write, not a conflict (lifecycle seed 1 of the simulation answered it 500).
The loss is injected in the SDK's HTTP transport, after the real request reached Azurite.
"""

from __future__ import annotations

import json
from typing import Any

from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import AioHttpTransport

from shared.core.events import Reason
from shared.ops import replay_jobs
from tests.app.conftest import RecordingPublisher, http_request
from tests.app.test_poison_tools import call


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
