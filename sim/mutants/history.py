"""Defects of issue 36 items 8 and 9, put back, caught in the `history` family (`sim.history`): the cancel bound
resting on a listing answered late, and costs that grow with history (`sim.checks.cost_promises`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import ResourceMissing, StorageError
from shared.engine.chunks import ChunkWork
from shared.ops import lifecycle
from shared.store import ended
from shared.store.received import utcnow
from shared.store.storage import translated
from sim.checks.cost_promises import CANCEL_COST, LOOK_COST, PAGE_COST
from sim.mutants.base import Mutant, swap

log = logging.getLogger(__name__)


@contextmanager
def _slow_listing_taken_as_fresh() -> Iterator[None]:
    """3cb4cd6's `_is_ended` put back: freshness judged only before the listing is awaited, never after it
    answered, so a listing answered seconds late is trusted as if it had just been made (its time is its start)."""

    async def is_ended(self: ChunkWork, batch_id: str) -> bool:
        known = self.s.ended
        if not known.fresh(time.monotonic()):
            if self._ended_listing is None:  # one listing for all the chunks that ask meanwhile
                self._ended_listing = asyncio.ensure_future(self._list_ended())
                self._ended_listing.add_done_callback(lambda _: setattr(self, "_ended_listing", None))
            await asyncio.shield(self._ended_listing)
        return batch_id in known

    yield from swap(ChunkWork, "_is_ended", is_ended)


@contextmanager
def _cancel_prunes_every_marker() -> Iterator[None]:
    """8ad9dd3's prune put back: each cancel lists every ended marker to delete those older than KEEP_S."""

    async def prune(state: ContainerClient, now: datetime) -> int:
        old: list[str] = []
        try:
            async with translated("list ended batches"):
                async for blob in state.list_blobs(name_starts_with=ended.PREFIX):
                    if blob.last_modified is not None and (now - blob.last_modified).total_seconds() > ended.KEEP_S:
                        old.append(blob.name)
            for name in old:
                async with translated(f"delete blob {name}"):
                    await state.delete_blob(name)
        except (ResourceMissing, StorageError) as e:
            log.info("ended markers not pruned this time: %s", e)
        return len(old)

    yield from swap(ended, "prune", prune)


@contextmanager
def _look_lists_every_marker() -> Iterator[None]:
    """8ad9dd3's look put back: every look at the ended batches lists every marker, not only the buckets written
    since the previous look began."""

    async def list_ended(self: ChunkWork) -> None:
        started, began = time.monotonic(), utcnow()
        state = self.s.storage.container(self.settings.state_container)
        found = await ended.listed(state)
        self.s.ended.listed(found.ids, started, began=began, full=found.full)

    yield from swap(ChunkWork, "_list_ended", list_ended)


@contextmanager
def _page_reads_a_window() -> Iterator[None]:
    """8ad9dd3's export put back: a page reads the records of WINDOW_CHUNKS chunks from its first, whatever its
    limit (a page of one line read up to 256 blobs)."""

    def windows(starts: list[int], first: int, end: int) -> Iterator[range]:
        chunks = len(starts) - 1
        for window in range(first, chunks, lifecycle.WINDOW_CHUNKS):
            yield range(window, min(window + lifecycle.WINDOW_CHUNKS, chunks))

    yield from swap(lifecycle, "_windows", windows)


STATED = "at most what docs/api.md states, whatever the history (`sim.checks.cost_promises`)"

MUTANTS = [
    Mutant("slow-listing-taken-as-fresh", "3cb4cd6 (issue 36 item 8)", "a listing of the ended markers answered "
           "seconds late is trusted as fresh (freshness judged before it was awaited)", _slow_listing_taken_as_fresh,
           family="history", expect="after its cancel was answered",
           invariant="no handler call of a cancelled batch starts more than ENDED_CHECK_S after the cancel's answer "
                     "(`sim.checks.invariants.Cancels`)"),
    Mutant("cancel-prunes-every-marker", "8ad9dd3 (issue 36 item 9)", "each cancel lists every ended marker of the "
           "week to prune the old ones", _cancel_prunes_every_marker, family="history", expect=CANCEL_COST,
           invariant=f"a cancel's storage requests {STATED}"),
    Mutant("look-lists-every-marker", "8ad9dd3 (issue 36 item 9)", "every drainer's look at the ended batches lists "
           "every marker of the week", _look_lists_every_marker, family="history", expect=LOOK_COST,
           invariant=f"a drainer's look at the ended batches (after its process's first) {STATED}"),
    Mutant("page-reads-a-window", "8ad9dd3 (issue 36 item 9)", "a results page reads the result blobs of 256 "
           "chunks whatever its limit", _page_reads_a_window, family="history", expect=PAGE_COST,
           invariant=f"a results page's storage requests {STATED}"),
]  # fmt: skip
