"""Defects in what a replay promises its caller (`sim.doors.replayers`: it takes only what it was asked for, and a
synchronous replay makes progress), caught in the `replay` family."""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared import api
from shared.core.errors import ReplayConflict
from shared.intake.body import Limits
from shared.ops import replay, replay_jobs
from shared.ops.parked import from_entry
from shared.ops.replay_request import replay_request
from shared.services import Services
from shared.store import poison_index
from sim.checks.replays import REOPENED
from sim.doors.replay_rings import LATE
from sim.doors.replayers import STARVED, WIDER
from sim.mutants.base import Mutant, scoped, swap


@contextmanager
def _closed_chunks_starve_replay() -> Iterator[None]:
    """315b8a6 reverted (issue 36 item 5): a replay skips the parked chunks of a final or ended batch, leaves them
    parked, and counts them against its `limit` (one listing of `limit` entries per partition): they are the oldest
    entries, so a replay of everything answers `replayed 0, more: true` for good and poison depth never returns to
    0. (Item 12's refusal stays: such chunks are still never replayed.)"""

    async def starving(services: Services, *, batch_id: str | None = None, message_ids: set[str] | None = None,
                       limit: int = replay.DEFAULT_LIMIT, rate: float | None = None,
                       exclude: frozenset[str] = frozenset(),
                       window_s: float | None = None) -> dict[str, Any]:  # fmt: skip
        closed: dict[str, replay.Closed | None] = {}
        if batch_id is not None:
            await replay.refuse_closed(services, batch_id, closed)
        window_s = replay.MAX_REPLAY_S if window_s is None else window_s
        pace = replay.Pace(rate)
        if rate is not None:
            limit = min(limit, 1 + math.floor(window_s * rate))
        deadline = time.monotonic() + window_s
        announcer = replay.Announcer(services)
        replayed: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        more = False
        state = await services.storage.ensure_container(services.settings.state_container)
        for work_queue in services.settings.partition_queues():
            name = services.settings.poison_queue(work_queue)
            client = await services.storage.ensure_queue(name)
            left = limit - len(replayed) - len(skipped)
            if left <= 0:
                more = True
                break
            found = await poison_index.find(
                state, name, batch_id=batch_id, message_ids=message_ids, limit=left, exclude=exclude
            )
            more = more or len(found) >= left
            for entry in found:
                if (replayed or skipped) and time.monotonic() >= deadline:
                    more = True
                    break
                parked = from_entry(entry)
                if parked.message.chunk_text is None:
                    skipped.append({**parked.summary(), "why": "not a chunk"})
                    continue
                closing = entry.batch_id is not None and await replay._closed(services, entry.batch_id, closed)
                if closing:
                    skipped.append({**parked.summary(), "why": "its batch was cancelled: not replayable"})
                    continue
                await pace.next()
                try:
                    why = await replay._replay_one(services, client, entry, parked, announcer, work_queue)
                except ReplayConflict as e:
                    why = e.message
                if why is not None:
                    skipped.append({**parked.summary(), "why": why})
                    continue
                replayed.append(parked.summary())
            if more and time.monotonic() >= deadline:
                break
        out = {"replayed": len(replayed), "skipped": skipped, "set_aside": 0, "chunks": replayed, "more": more}
        return out | {"limit": limit, "seconds": round(pace.elapsed(), 3)}

    def step_limit(self: replay_jobs.Job) -> int:
        left = self.limit - self.replayed - len(self.skipped_ids)
        return max(0, left if self.rate is None else min(left, 1 + int(replay_jobs.STEP_S * self.rate)))

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(replay, "replay", starving))
        stack.enter_context(scoped(replay_jobs.Job, "step_limit", step_limit))
        yield


OLD_FIELDS = ("batch_id", "message_ids", "limit", "rate")  # the fields before 315b8a6 ("background" null was a 400)


@contextmanager
def _null_widens_replay() -> Iterator[None]:
    """315b8a6 reverted (issue 36 item 15): the replay route takes an empty body, `{}`, a body of options only and
    a null `batch_id`, `message_ids`, `limit` or `rate` (a null read as left out) as a replay of everything: every
    parked chunk of every tenant, for whoever may replay everything (the operator, the trusted caller)."""

    def lenient(body: bytes, limits: Limits) -> dict[str, Any]:
        if not body.strip():
            return {}
        try:
            doc = json.loads(body)
        except ValueError:
            return replay_request(body, limits)  # malformed JSON: the same 400 as today
        if not isinstance(doc, dict):
            return replay_request(body, limits)
        doc = {k: v for k, v in doc.items() if v is not None or k not in OLD_FIELDS}  # a null read as left out
        if not {"all", "batch_id", "message_ids"} & set(doc):
            doc["all"] = True  # nothing named: everything
        return replay_request(json.dumps(doc).encode(), limits)

    yield from swap(api, "replay_request", lenient)


RINGS: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("rings_at_end", default=None)


@contextmanager
def _replay_rings_at_end() -> Iterator[None]:
    """The audit's defect (issue 37 item 3), fixed by issue 26 item 5: a replay rings each partition's doorbell
    once its whole call is over, not as the partition's first chunk goes back, so the chunks it put back first wait
    for the rest (a paced replay: up to its 60 s window) with no drainer told of them."""
    ring, replaying = replay._ring, replay.replay

    async def held(services: Services, queues: set[str]) -> None:
        pending = RINGS.get()
        if pending is None:
            await ring(services, queues)
        else:
            pending.update(queues)

    async def at_end(services: Services, **request: Any) -> dict[str, Any]:
        token = RINGS.set(set())
        try:
            answer = await replaying(services, **request)
            queues = RINGS.get() or set()
        finally:
            RINGS.reset(token)
        await ring(services, queues)
        return answer

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(replay, "_ring", held))
        stack.enter_context(scoped(replay, "replay", at_end))
        yield


@contextmanager
def _replay_claim_unfenced() -> Iterator[None]:
    """The fence reverted (`shared.store.claim_fence`): a replay's claim leaves the manifest as it is, so a call that
    judged its batch open claims and puts back a chunk of a batch stamped final since, and a finalize that listed
    the records just before a claim stamps the batch after it (replay seed 787: `completed_with_failures` stamped,
    the replayed items succeed, the status route says `completed`)."""

    async def unfenced(services: Services, batch_id: str) -> Any:
        return None

    yield from swap(replay, "_fenced", unfenced)


MUTANTS = [
    Mutant("closed-chunks-starve-replay", "315b8a6 (issue 36 item 5)", "a replay skips the parked chunks of final "
           "or ended batches, never deletes them and counts them against its limit", _closed_chunks_starve_replay,
           family="replay", expect=STARVED,
           invariant="a synchronous replay makes progress, and leaves no chunk of a closed batch parked "
                     "(`sim.doors.replayers`)"),
    Mutant("null-widens-replay", "315b8a6 (issue 36 item 15)", "an empty body, {}, options only or a null "
           "`batch_id` replays every parked chunk of every tenant", _null_widens_replay, family="replay",
           expect=WIDER, invariant="a replay takes only what it was asked for, and only its caller's tenant's "
                                   "(`sim.doors.replayers`)"),
    Mutant("replay-rings-at-end", "c8e5957 (issue 26 item 5; the audit put it back)", "a replay rings its "
           "partitions' doorbells only once its whole call is over", _replay_rings_at_end, family="replay",
           expect=LATE, invariant="a replay announces each partition's first chunk as it goes back "
                                  "(`sim.doors.replay_rings`)"),
    Mutant("replay-claim-unfenced", "e721824 (issue 37, replay seed 787)", "a replay's claim does not "
           "touch the manifest: a stamp lands between a call's judgement and its claim, or after the claim over "
           "an ETag read before it", _replay_claim_unfenced, family="straddle", expect=REOPENED,
           invariant="a replay never reopens a batch stamped final (`sim.checks.replays`)"),
]  # fmt: skip
