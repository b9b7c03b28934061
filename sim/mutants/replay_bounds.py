"""Defects in a replay's bounds (issue 26 items 2, 10 and 15, fixed by c8e5957): its time (`sim.doors.replay_time`), and
the stale parked copies it leaves behind (`sim.doors.replayers`), caught in the `replay` family."""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.batch import envelope
from shared.ops import replay, replay_jobs
from shared.ops import replay_marks as marks
from shared.ops.parked import Parked
from shared.ops.replay_marks import Parent
from shared.services import Services
from shared.store import poison_index
from shared.store.storage import NEVER_EXPIRES, translated
from sim.doors.replay_time import UNBOUNDED
from sim.doors.second_parks import STALE
from sim.mutants.base import Mutant, scoped, swap
from sim.sessions import OVERRUN

FOREVER_S = 1e9  # a deadline that never comes


@contextmanager
def _replay_unbounded_in_time() -> Iterator[None]:
    """c8e5957 reverted (issue 26 item 2): only a paced replay is bounded, by its `limit` (what its rate allows in
    its window); an unpaced one takes every parked chunk it matches (up to `limit`, 1,000 by default, 10,000
    asked) however long that takes: 261 s for about 2,000 chunks, past Azure's 230 s cut. A background step's
    replay alike (its window only sizes a paced step's limit)."""
    bounded = replay.replay

    async def unbounded(services: Services, *, limit: int = replay.DEFAULT_LIMIT, rate: float | None = None,
                        window_s: float | None = None, **request: Any) -> dict[str, Any]:  # fmt: skip
        if rate is not None:
            limit = min(limit, 1 + math.floor((replay.MAX_REPLAY_S if window_s is None else window_s) * rate))
        return await bounded(services, limit=limit, rate=rate, window_s=FOREVER_S, **request)

    yield from swap(replay, "replay", unbounded)


@contextmanager
def _stale_copies_kept() -> Iterator[None]:
    """c8e5957 reverted (issue 26 item 15): a parked copy whose items a later attempt settled (a redelivery's
    second park, its other copy replayed and handled) is left parked, "no longer failed", at every replay: poison
    depth never returns to 0 (DESIGN said such copies are deleted; README that they stay)."""

    async def keeps(services: Services, client: Any, entry: poison_index.Entry, parked: Parked,
                    announcer: replay.Announcer, partition: str) -> str | None:  # fmt: skip
        assert parked.message.chunk_text is not None
        chunk = envelope.decode(parked.message.chunk_text)
        lane = replay.replay_lane(partition, parked.message.info.queue)
        found, claimed = await marks.claim(services, chunk.header)
        if found is Parent.SETTLED or claimed is None:  # the stale copy left parked, as any other
            return "its items are no longer failed (a later attempt settled them, or it was replayed already)"
        work = await services.storage.ensure_queue(lane)
        try:
            await announcer.before(lane)
            async with translated(f"re-enqueue to {lane}"):
                await work.send_message(parked.message.chunk_text, time_to_live=NEVER_EXPIRES)
        except Exception:
            await marks.release(services, chunk.header, claimed)
            raise
        await announcer.announce(lane, partition)
        await replay._unpark(services, client, entry, parked)
        return None

    yield from swap(replay, "_replay_one", keeps)


IN_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("in_step", default=False)
UNPACED_STEP = 500  # chunks a step took without a rate, before c8e5957


@contextmanager
def _steps_sized_by_rate() -> Iterator[None]:
    """c8e5957 reverted (issue 26 item 10, its second half): a background step is sized by its rate, not by time
    (500 chunks without a rate, however long they take), so it can outlive its claim (STEP_S + 30 s); a step
    event that finds the job held does nothing (no step is scheduled for when the hold lapses), so a killed step's
    job waits for a status read, and a status read past STALL_S starts a second step beside a live first one,
    whose progress is then lost (its write meets the second's ETag). Since 8d437f4 a step writes its progress as it
    goes and a write that meets another step's claim merges what it took, so that loss no longer shows (LOST holds
    in 300 seeds); what shows is the step itself, minutes long, past the drain function's budget (`sim.sessions`)."""
    bounded, stepping = replay.replay, replay_jobs.step

    async def replaying(services: Services, **request: Any) -> dict[str, Any]:
        if IN_STEP.get():
            request["window_s"] = FOREVER_S
        return await bounded(services, **request)

    async def step(services: Services, job_id: str) -> replay_jobs.Job | None:
        job, _ = await replay_jobs.read(services, job_id)
        if job.state == "running" and job.step_until > time.time():
            return None  # held: nothing more
        token = IN_STEP.set(True)
        try:
            return await stepping(services, job_id)
        finally:
            IN_STEP.reset(token)

    def step_limit(self: replay_jobs.Job) -> int:
        left = self.limit - self.replayed - len(self.skipped_ids)
        per_step = UNPACED_STEP if self.rate is None else 1 + int(replay_jobs.STEP_S * self.rate)
        return max(0, min(left, per_step))

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(replay, "replay", replaying))
        stack.enter_context(scoped(replay_jobs, "step", step))
        stack.enter_context(scoped(replay_jobs.Job, "step_limit", step_limit))
        yield


MUTANTS = [
    Mutant("replay-unbounded-in-time", "c8e5957 (issue 26 item 2)", "an unpaced synchronous replay takes every "
           "parked chunk it matches, however long that takes", _replay_unbounded_in_time, family="replay",
           expect=UNBOUNDED, invariant="a synchronous replay takes no chunk after its 60 s and answers within "
                                       "Azure's 230 s cut (`sim.doors.replay_time`)"),
    Mutant("stale-copies-kept", "c8e5957 (issue 26 item 15)", "a parked copy whose items a later attempt settled is "
           "left parked at every replay", _stale_copies_kept, family="replay", expect=STALE,
           invariant="poison depth returns to 0: a replay of everything leaves no copy parked that was stale when "
                     "it began (`sim.doors.second_parks`)"),
    Mutant("steps-sized-by-rate", "c8e5957 (issue 26 item 10, second half)", "a background replay's step takes "
           "500 chunks without a rate however long they take, and a step event that finds the job held does nothing",
           _steps_sized_by_rate, family="replay", expect=OVERRUN,
           invariant="a drain session, a replay step's too, ends within DRAIN_BUDGET_S + 60 s (`sim.sessions`)"),
]  # fmt: skip
