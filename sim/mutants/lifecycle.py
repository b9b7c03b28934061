"""Defects in the batch lifecycle (cancel, expiry, notices, replay), caught by the lifecycle checks
(`sim.checks.invariants.Cancels` and the final checks)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from shared.core.errors import ResourceMissing
from shared.engine.chunks import ChunkWork
from shared.handlers import ChunkResult, ItemOutcome, checked, is_async
from shared.ops import lifecycle, notice_sweep, notices, replay, replay_marks
from shared.ops import status as status_module
from shared.ops.status import batch_status
from shared.store import ended
from shared.store.storage import translated
from sim.checks.replays import STRANDED
from sim.mutants.base import Mutant, scoped, swap

NOTICED = "its completion notice came"  # the notices promise (`sim.checks.promises.notices_delivered`)


@contextmanager
def _ended_marker_goes_at_last_record() -> Iterator[None]:
    """dd28184 reverted: finalize deletes an ended batch's marker once every chunk of it has a record, though a
    chunk recorded by a drainer that died before deleting its message is still to come back."""
    finalize = lifecycle.finalize

    async def unmarking(services: Any, batch_id: str) -> Any:
        manifest, _, entries = await lifecycle.read(services, batch_id)
        status = batch_status(manifest, entries, datetime.now(timezone.utc))
        recorded = {e.chunk for e in entries}
        if manifest.ended is not None and status["items"]["pending"] == 0 and len(recorded) == manifest.chunks:
            state = services.storage.container(services.settings.state_container)
            with contextlib.suppress(ResourceMissing):
                async with translated("delete ended marker"):
                    await state.delete_blob(ended.marker(batch_id))
        return await finalize(services, batch_id)

    yield from swap(lifecycle, "finalize", unmarking)


@contextmanager
def _stamp_not_the_status() -> Iterator[None]:
    """`finalize` stamps a batch `completed` that the status route counts `completed_with_failures` (a stamp taken
    from other counts than the status route's)."""

    def stamping(obj: Any, /, **changes: Any) -> Any:
        if changes.get("final_status") == "completed_with_failures":
            changes["final_status"] = "completed"
        return dataclasses.replace(obj, **changes)

    yield from swap(lifecycle, "replace", stamping)


@contextmanager
def _notice_lost_at_kill() -> Iterator[None]:
    """3d7445d's sweep reverted (issue 36 item 3): the timer's sweep sees only stored notices, so a final batch
    with a callback whose notice was never stored is not looked at again (only a status read would heal it): its
    host died between the stamp and the notice, or after the last chunk's delete and before `finalize_all`, or a
    storage error `finalize_all` swallowed refused its stamp. 3d7445d also stored the notice before the stamp;
    today's `finalize` stamps first again (a notice states only a status that won the stamp: issue 37, lifecycle
    seed 601), so the sweep half is all of the fix that is left to put back."""

    async def sweep(services: Any) -> tuple[int, int]:
        return await notices.sweep(services, await notices.listed(services)), 0

    yield from swap(notice_sweep, "sweep", sweep)


@contextmanager
def _sync_judged_before_the_pool() -> Iterator[None]:
    """3cb4cd6 reverted (issue 36 items 4, 13): a sync handler's chunk is judged on the loop, then waits for one
    of the thread pool's few threads (`asyncio.to_thread`), and its call starts however long after its batch was
    cancelled or expired meanwhile."""
    run_handler = ChunkWork._run_handler

    async def pooled(self: ChunkWork, header: Any, items: list[Any], context: Any) -> Any:
        handler = self.s.handler
        if is_async(handler):
            return await run_handler(self, header, items, context)
        try:
            return checked(await asyncio.to_thread(handler, items, context), len(items))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            return ChunkResult([ItemOutcome.failure(f"handler raised {type(e).__name__}: {e}"[:500])] * len(items))

    yield from swap(ChunkWork, "_run_handler", pooled)


@contextmanager
def _tolerance_judged_once() -> Iterator[None]:
    """28988df reverted (issue 36 item 7): `max_failed_fraction` is judged only right after a failing chunk is
    deleted, in that process; where that judgement is lost (here: it never ends the batch, as a crash or a storage
    error there does), the batch runs to the end and ends `completed_with_failures` past its tolerance."""

    async def tolerance(self: ChunkWork, header: Any, record: Any) -> None:
        return None

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(ChunkWork, "tolerance", tolerance))
        for module in (status_module, lifecycle):
            stack.enter_context(scoped(module, "crossed_tolerance", lambda manifest, failed: False))
        yield


@contextmanager
def _final_batch_replayed() -> Iterator[None]:
    """315b8a6 reverted (issue 36 item 12): a replay puts back the parked chunks of a batch already final, so a
    batch reported `completed_with_failures` (its stamp, its one notice) reads `processing`, then something else.
    Both places that judge it go: the call's judgement of each batch and the claim's fence (only an ended batch
    is refused)."""

    def why(manifest: Any, final: bool = False) -> Any:
        return replay.Closed.ENDED if manifest.ended is not None else None

    yield from swap(replay, "_why", why)


@contextmanager
def _replay_strands_chunk() -> Iterator[None]:
    """315b8a6 reverted (issue 36 item 1): a replay whose lane mark or send fails keeps its claim on the chunk (its
    items left `retrying` with nothing carrying them), and no later replay takes a dead replay's claim over: the
    batch reads `processing` for good."""

    async def kept(*args: Any, **kwargs: Any) -> None:
        return None

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(replay_marks, "release", kept))
        stack.enter_context(scoped(replay_marks, "CLAIM_S", 10**9))
        yield


MUTANTS = [
    Mutant("ended-marker-goes-at-last-record", "dd28184 (found here)", "an ended batch's marker deleted once every "
           "chunk has a record", _ended_marker_goes_at_last_record, family="lifecycle",
           expect="after its cancel was answered", invariant="no handler call past the cancel bound",
           why="caught by lifecycle seed 154 before this stop's engine changes (crash and receiver order, a "
           "recorded chunk not run again) moved that seed; not in 300 seeds on 3e30b1b; plan: a cancel scenario "
           "whose batch's last chunk is recorded while another delivery of an earlier chunk waits to start"),
    Mutant("stamp-not-the-status", "none (made here)", "a batch stamped completed that the status route counts "
           "completed_with_failures", _stamp_not_the_status, expect="is stamped",
           invariant="a final stamp never changes and is the status route's (`sim.checks.promises`)"),
    Mutant("notice-lost-at-kill", "3d7445d (issue 36 item 3)", "the timer's sweep sees only stored notices: a "
           "final batch whose notice a kill or a refused stamp kept back is never looked at again",
           _notice_lost_at_kill, family="lifecycle", expect=NOTICED,
           invariant="every final batch with a callback gets a valid notice that agrees (`sim.checks.promises`)"),
    Mutant("sync-judged-before-the-pool", "3cb4cd6 (issue 36 items 4, 13)", "a sync handler's chunk judged on the "
           "loop, then waiting for a pool thread", _sync_judged_before_the_pool, family="lifecycle",
           expect="handler call of", invariant="no handler call past the cancel or expiry bound, sync or async"),
    Mutant("tolerance-judged-once", "28988df (issue 36 item 7)", "max_failed_fraction judged only where a failing "
           "chunk is deleted, and that judgement lost", _tolerance_judged_once, family="lifecycle",
           expect="past its max_failed_fraction",
           invariant="no batch completes past its max_failed_fraction (`sim.checks.promises`)"),
    Mutant("final-batch-replayed", "315b8a6 (issue 36 item 12)", "a replay puts back the parked chunks of a batch "
           "already final", _final_batch_replayed, family="lifecycle", expect="is stamped",
           invariant="a final stamp never changes and is the status route's (`sim.checks.promises`)"),
    Mutant("replay-strands-chunk", "315b8a6 (issue 36 item 1)", "a replay that fails part-way keeps its claim, and "
           "no replay takes a dead one's claim over", _replay_strands_chunk, family="lifecycle", expect=STRANDED,
           invariant="a replayed chunk is never stranded (`sim.checks.replays`)"),
]  # fmt: skip
