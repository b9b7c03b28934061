"""A background replay step killed mid-step, on the real Azurite: the job still counts every chunk it took.

A step writes its job as it goes (`shared.ops.replay_journal`): the counts so far and the group of chunks in hand.
Its task is cancelled here right after its first chunk is back on the queue and gone from the poison index, as an
instance's death would stop it; the next step counts that chunk (before, the job's counts were written only at a
step's end, and the chunk was counted by no one: the replay family's LOST invariant, seeds 2, 37 and 50).
"""

from __future__ import annotations

import asyncio
from typing import Any

from shared.ops import replay, replay_jobs
from shared.store import poison_index
from shared.store.storage import read_json, write_json
from tests.app.parked import finish, parked, parking


async def parked_ids(services: Any) -> set[str]:
    state = services.storage.container(services.settings.state_container)
    out: set[str] = set()
    for work_queue in services.settings.partition_queues():
        name = services.settings.poison_queue(work_queue)
        out |= set(await poison_index.oldest(state, name, batch_id=None, message_ids=None, limit=100))
    return out


async def lapse_claim(services: Any, job_id: str) -> None:
    """The dead step's claim lapses (what waiting STEP_S + CLAIM_MARGIN_S would do)."""
    state = services.storage.container(services.settings.state_container)
    doc, etag = await read_json(state, replay_jobs.job_blob(job_id))
    await write_json(state, replay_jobs.job_blob(job_id), doc | {"step_until": 0.0}, etag=etag)


async def test_a_replay_step_killed_after_sending_a_chunk_back_leaves_it_counted(configure, monkeypatch):
    services = parking(configure)
    batch_id = await parked(services)  # r-7, r-17 and r-27 parked, one chunk held: still processing
    before = await parked_ids(services)
    assert len(before) == 3
    job = await replay_jobs.start(services, batch_id=batch_id)

    real_unpark = replay._unpark
    unparked = asyncio.Event()

    async def unpark_then_die(*args: Any) -> None:
        await real_unpark(*args)
        unparked.set()
        await asyncio.Event().wait()  # the instance dies here: the task is cancelled

    monkeypatch.setattr(replay, "_unpark", unpark_then_die)
    killed = asyncio.create_task(replay_jobs.step(services, job.job_id))
    await asyncio.wait_for(unparked.wait(), 30)
    killed.cancel()
    await asyncio.gather(killed, return_exceptions=True)
    assert len(await parked_ids(services)) == 2, "the killed step had sent one chunk back"
    monkeypatch.setattr(replay, "_unpark", real_unpark)

    await lapse_claim(services, job.job_id)
    for _ in range(5):  # the next steps, until the job is done
        done = await replay_jobs.step(services, job.job_id)
        if done is not None and done.state == "done":
            break
    view = await replay_jobs.status(services, job.job_id)

    assert view["state"] == "done", view
    assert await parked_ids(services) == set(), "every parked chunk replayed"
    assert (view["replayed"], view["set_aside"], view["skipped"]) == (3, 0, 0), view
    assert (await finish(services, batch_id))["status"] == "completed_with_failures"


async def test_a_step_that_outlived_its_claim_adds_only_what_the_next_step_did_not_count_for_it(configure, monkeypatch):
    services = parking(configure)
    batch_id = await parked(services)
    job = await replay_jobs.start(services, batch_id=batch_id)

    real_unpark = replay._unpark
    unparked, go = asyncio.Event(), asyncio.Event()

    async def unpark_then_stall(*args: Any) -> None:
        await real_unpark(*args)
        if not unparked.is_set():  # the first step stalls past its claim after its first chunk
            unparked.set()
            await go.wait()

    monkeypatch.setattr(replay, "_unpark", unpark_then_stall)
    late = asyncio.create_task(replay_jobs.step(services, job.job_id))
    await asyncio.wait_for(unparked.wait(), 30)
    await lapse_claim(services, job.job_id)
    second = await replay_jobs.step(services, job.job_id)  # counts the stalled step's chunk, replays the rest
    assert second is not None
    assert (second.state, second.replayed) == ("done", 3), second
    go.set()
    assert await asyncio.wait_for(late, 30) is None, "the stalled step knows it lost the job"
    view = await replay_jobs.status(services, job.job_id)

    assert (view["state"], view["replayed"], view["set_aside"], view["skipped"]) == ("done", 3, 0, 0), view
    assert await parked_ids(services) == set()
    assert (await finish(services, batch_id))["status"] == "completed_with_failures"
