"""Background replays: a replay too large for one answer runs as a job, a step at a time.

`POST /api/poison/replay` with `"background": true` writes a job (`replays/<job id>.json`, state container) and
publishes a `replay-step` event; the drain function serves it by replaying for at most STEP_S (what the job's rate
allows in that, if it has one: `shared.ops.replay.replay`, the same code as a replay in the foreground), writing the
job's progress as it goes (before each group of chunks, so the next step counts what a step killed mid-step took:
`shared.ops.replay_journal`), and publishing the next step until nothing matching is left or the job's limit is
reached. A step claims the job (its `step_until`, STEP_S + CLAIM_MARGIN_S ahead, written with the blob's ETag) so
that a redelivered event and a kick never run two steps at once; a step sized by time ends before its claim does. An
event that finds the job claimed schedules a step for when the claim lapses (a step whose instance died goes on
then). If a step's event is lost (Service Bus unreachable), reading the job's status after STALL_S publishes it
again. Chunks a step leaves parked (not chunks, or no longer failed) are remembered and never tried again by the
job. Progress: `GET /api/poison/replay/{job id}`. A finished job's blob is deleted KEEP_DONE_S after it finished, by
a later job's start.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import (
    BatchConflict,
    BatchFinal,
    NotFound,
    PreconditionFailed,
    ResourceConflict,
    ResourceMissing,
    StorageError,
    TriggerUnavailable,
)
from shared.core.events import Reason, TriggerEvent
from shared.ops import replay
from shared.ops.replay_journal import RECOVERED_KEPT, Journal, StepTaken, recover
from shared.services import Services
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger(__name__)

STEP_S = 60.0  # a step stops taking chunks after this long (the drain function's budget is longer)
STALL_S = 3 * STEP_S  # a running job not written for this long has lost its step event
CLAIM_MARGIN_S = 30.0  # a step holds its job this long past STEP_S: its last chunk and its progress write
KEEP_DONE_S = 7 * 24 * 3600  # a finished job's blob is deleted this long after it finished ...
SWEEP_MAX = 100  # ... by the next job's start, at most this many at a time (one listing, one delete each)


JOBS_PREFIX = "replays/"


def job_blob(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}.json"


def is_job_id(text: str) -> bool:
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass(frozen=True)
class Job:
    job_id: str
    limit: int
    rate: float | None = None
    batch_id: str | None = None
    message_ids: list[str] | None = None
    state: str = "running"  # running | done
    replayed: int = 0
    set_aside: int = 0  # chunks of final or ended batches met and set aside (`shared.ops.replay`)
    skipped_ids: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # the first SKIPPED_SHOWN, with why
    steps: int = 0
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    step_until: float = 0.0  # epoch seconds: a step holds the job until then
    step_id: str = ""  # the step holding the job (or that held it last)
    in_hand: list[str] = field(default_factory=list)  # the group of chunks its step is taking (`replay_journal`)
    in_hand_queue: str = ""  # their poison queue
    recovered: list[str] = field(default_factory=list)  # the last chunks counted for a step that died
    write_id: str = ""  # the last write's own id (`replay_journal.Journal.write`)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Job:
        return cls(**doc)

    def step_limit(self) -> int:
        """What one step may take; a step is sized by time (STEP_S), so without a rate this is all that is left.
        Only replayed chunks spend the limit (not those left parked or set aside)."""
        left = self.limit - self.replayed
        return max(0, left if self.rate is None else min(left, 1 + int(STEP_S * self.rate)))

    def view(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "rate": self.rate,
            "limit": self.limit,
            "batch_id": self.batch_id,
            "replayed": self.replayed,
            "set_aside": self.set_aside,
            "skipped": len(self.skipped_ids),
            "skipped_first": self.skipped,
            "steps": self.steps,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "status_url": status_url(self.job_id),
        }


def status_url(job_id: str) -> str:
    return f"/api/poison/replay/{job_id}"


async def start(
    services: Services,
    *,
    batch_id: str | None = None,
    message_ids: set[str] | None = None,
    limit: int = replay.DEFAULT_LIMIT,
    rate: float | None = None,
) -> Job:
    """Write the job and publish its first step; the job stands even if Service Bus cannot be reached (its
    status read publishes the step again)."""
    if batch_id is not None:  # refused as the foreground's is (409), not started to fail at every step
        await replay.refuse_closed(services, batch_id)
    ids = sorted(message_ids) if message_ids is not None else None
    job = Job(uuid.uuid4().hex, limit, rate, batch_id, ids)
    state = await services.storage.ensure_container(services.settings.state_container)
    await sweep(state, time.time())
    try:
        await write_json(state, job_blob(job.job_id), job.to_json(), create_only=True)
    except (ResourceConflict, PreconditionFailed):
        if not await _own_write(state, job):
            raise
    await publish_step(services, job.job_id)
    log.warning("replay job %s started: batch %s, limit %d, rate %s", job.job_id, batch_id, limit, rate)
    return job


async def _own_write(state: ContainerClient, job: Job) -> bool:
    """Whether the blob a create-only write found is this job's own: the SDK's retry met what its first attempt
    wrote, whose answer was lost (the simulation found that answered 500). A fresh job id names no other job;
    the stored creation time tells a foreign blob apart all the same."""
    doc, _ = await read_json(state, job_blob(job.job_id))
    mine = isinstance(doc, dict) and doc.get("job_id") == job.job_id and doc.get("created_at") == job.created_at
    if mine:
        log.info("replay job %s: its blob was written by the first attempt of its write", job.job_id)
    return mine


async def sweep(state: ContainerClient, now_s: float) -> int:
    """Delete finished jobs' blobs KEEP_DONE_S after they finished (their metadata says when: no reads). Best
    effort: a job left behind is deleted by a later start. Answers how many were deleted."""
    old: list[str] = []
    try:
        async with translated("list replay jobs"):
            async for blob in state.list_blobs(name_starts_with=JOBS_PREFIX, include=["metadata"]):
                finished = (blob.metadata or {}).get("finished_s", "")
                if finished.isdigit() and len(finished) <= 12 and int(finished) + KEEP_DONE_S < now_s:
                    old.append(blob.name)
                    if len(old) >= SWEEP_MAX:
                        break
        for name in old:
            try:
                async with translated(f"delete {name}"):
                    await state.delete_blob(name)
            except ResourceMissing:
                pass
    except StorageError as e:
        log.warning("finished replay jobs not swept (the next start tries again): %s", e)
    if old:
        log.info("deleted %d finished replay job(s) older than %d s", len(old), KEEP_DONE_S)
    return len(old)


def job_metadata(job: Job) -> dict[str, str]:
    """A finished job's blob says when it finished, so a listing finds the old ones (`sweep`)."""
    if job.finished_at is None:
        return {}
    return {"finished_s": str(int(datetime.fromisoformat(job.finished_at).timestamp()))}


async def publish_step(services: Services, job_id: str, at: datetime | None = None) -> bool:
    queue = services.settings.partition_queues()[0]  # events name a queue; a step's is the first partition
    event = TriggerEvent(services.settings.account_name, queue, Reason.REPLAY_STEP, job=job_id)
    try:
        await services.publisher.publish(event, at=at)
    except TriggerUnavailable as e:
        log.warning("replay job %s: next step not published (its status read will publish it): %s", job_id, e)
        return False
    return True


async def read(services: Services, job_id: str) -> tuple[Job, str]:
    if not is_job_id(job_id):
        raise NotFound("no replay job has this id (job ids are 32 lowercase hex digits)", job_id=job_id[:64])
    state = await services.storage.ensure_container(services.settings.state_container)
    try:
        doc, etag = await read_json(state, job_blob(job_id))
    except ResourceMissing:
        raise NotFound(f"no replay job {job_id}", job_id=job_id) from None
    return Job.from_json(doc), etag


async def step(services: Services, job_id: str) -> Job | None:
    """One step of the job; None when another step holds it or it is done. A step finds the job held when its
    event is a redelivery (its first delivery's instance died mid-step) or a duplicate: it schedules a step
    for when the hold lapses, so a dead step's job goes on without waiting for a status read."""
    job, etag = await read(services, job_id)
    if job.state != "running":
        return None
    if job.step_until > time.time():
        await publish_step(services, job_id, at=datetime.fromtimestamp(job.step_until + 1, timezone.utc))
        return None
    state = services.storage.container(services.settings.state_container)
    began = time.monotonic()  # counting a dead step's chunks comes out of this step's STEP_S
    claimed = await _claim(state, job)
    window_s = max(0.0, STEP_S - (time.monotonic() - began)) if job.in_hand else STEP_S
    try:
        etag = await write_json(state, job_blob(job_id), claimed.to_json(), etag=etag)
    except (PreconditionFailed, ResourceConflict):
        return None  # another step took it
    wanted = claimed.step_limit()
    journal = Journal(state, job_blob(job_id), claimed.to_json(), etag)
    try:
        answer = await replay.replay(
            services,
            batch_id=job.batch_id,
            message_ids=set(job.message_ids) if job.message_ids is not None else None,
            limit=wanted,
            rate=job.rate,
            exclude=frozenset(job.skipped_ids),
            window_s=window_s,
            journal=journal,
        )
    except StepTaken:
        return None  # what it took is counted; the step that claimed the job goes on
    except (BatchFinal, BatchConflict) as e:
        # Its batch became final or ended since the job began: nothing of it is replayed, now or later. The job
        # is done (raising would bring the step back at every claim's end, for as long as the job exists).
        log.warning("replay job %s: done, %s", job_id, e)
        answer = {"replayed": 0, "set_aside": 0, "skipped": [], "more": False}
    skipped = answer["skipped"]
    finished = not answer["more"] or claimed.replayed + answer["replayed"] >= job.limit
    ended: dict[str, Any] = {"steps": job.steps + 1, "state": "done" if finished else "running", "in_hand": []}
    ended |= {"step_until": 0.0, "finished_at": now_iso() if finished else None}
    done = Job.from_json(await journal.write(ended, job_metadata(Job.from_json(journal.doc | ended))))
    if journal.lost:
        return None
    log.warning(
        "replay job %s step %d: %d replayed, %d left parked; %s",
        job_id, done.steps, answer["replayed"], len(skipped), "done" if finished else "more to come",
    )  # fmt: skip
    if not finished:
        await publish_step(services, job_id)
    return done


async def _claim(state: ContainerClient, job: Job) -> Job:
    """The job claimed by a new step, with the chunks a dead step took and had not counted counted now."""
    replayed, aside = await recover(state, job.in_hand, job.in_hand_queue) if job.in_hand else ([], [])
    return replace(
        job,
        step_until=time.time() + STEP_S + CLAIM_MARGIN_S,
        step_id=uuid.uuid4().hex,
        in_hand=[],
        replayed=job.replayed + len(replayed),
        set_aside=job.set_aside + len(aside),
        recovered=(job.recovered + replayed + aside)[-RECOVERED_KEPT:],
    )


async def status(services: Services, job_id: str) -> dict[str, Any]:
    """The job's progress; a running job whose step event was lost gets it again."""
    job, _ = await read(services, job_id)
    updated = datetime.fromisoformat(job.updated_at).timestamp()
    stalled = job.state == "running" and job.step_until < time.time() and time.time() - updated > STALL_S
    if stalled and await publish_step(services, job_id):
        log.warning("replay job %s had stalled since %s; its next step is published again", job_id, job.updated_at)
    return job.view()
