"""While a drainer works: listing its queue's lanes, so a lane with new work is found within about LANE_POLL_S.

The receivers serve the lanes the drainer knows (`shared.core.lanes.LaneOrder`); this watcher lists them again
when a listing is due, learns each lane's mark (which names the batch its submit committed, so the engine admits
that batch with no manifest read) and tells the drainer which lanes woke up mid-drain, for an express page.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
from collections.abc import Callable

from shared.core.errors import StorageError
from shared.core.lanes import Lane, LaneOrder, committed_in
from shared.engine import lane_queues
from shared.services import Services

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine

LANE_POLL_S = 0.05  # while draining, the lanes are listed again at most this often (a new tenant's wait) ...
LANE_POLL_MESSAGES = 4  # ... and at most once per this many messages received ...
LANE_POLL_MAX_S = 1.0  # ... unless this long has passed
LANE_WATCH_S = 0.025  # how often the watcher asks whether a listing is due (no I/O unless it is)


class LaneWatch:
    def __init__(
        self,
        services: Services,
        queue: str,
        order: LaneOrder,
        clock: Callable[[], float],
        *,
        committed: Callable[[str, str, int], None],
        woke: Callable[[list[str], bool], None],
        mid_drain: Callable[[], bool],
    ) -> None:
        """`committed(batch_id, attempt, accepted_ms)`: a mark named a batch the drainer had not seen committed;
        `woke(lanes, mid_drain)`: a listing found these lanes with new work; `mid_drain()`: whether the drainer's
        receivers hold a lease and have received something."""
        self.s, self.queue_name, self.order, self.clock = services, queue, order, clock
        self._committed, self._woke, self._mid_drain = committed, woke, mid_drain
        self.listed_at = -math.inf
        self.handled = 0  # messages whose handling ended
        # Messages whose chunk took a place (pages arrive 32 at a time; these one by one, as places come free,
        # while chunks end in bursts, as their results' group commits return).
        self.started = 0
        self._started_at_listing = 0
        self._listing: asyncio.Task[None] | None = None
        self._context: contextvars.Context | None = None  # the watcher's, once it watches

    def recently_listed(self) -> bool:
        return self.clock() - self.listed_at < LANE_POLL_S

    def due(self) -> bool:
        """List the lanes again at most every LANE_POLL_S, and at most once per LANE_POLL_MESSAGES messages
        started unless LANE_POLL_MAX_S has passed: at most one transaction per 4 messages (1,000 items at the
        default chunk size) while the drain is fast, at least one a second while it is slow."""
        since = self.clock() - self.listed_at
        started = self.started - self._started_at_listing
        return since >= LANE_POLL_S and (started >= LANE_POLL_MESSAGES or since >= LANE_POLL_MAX_S)

    async def watch(self) -> None:
        """While the receivers work, list the lanes whenever that is due (`due`): a new tenant's batch is found
        within about LANE_POLL_S, however long the receivers' pages take."""
        self._context = contextvars.copy_context()  # the session's: what a submit's news is taken in (`heard`)
        while True:
            await asyncio.sleep(LANE_WATCH_S)
            if self.due():
                await self.list_once()

    async def list_once(self) -> None:
        """One listing at a time, whichever receiver finds it due; the others go on receiving."""
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(self.list())
            self._listing.add_done_callback(self._listed)
            # Best effort: the lanes already known are served meanwhile (`_listed` logs the failure).
            with contextlib.suppress(StorageError):
                await asyncio.shield(self._listing)

    def _listed(self, listing: asyncio.Task[None]) -> None:
        """Every listing's outcome is retrieved here, also when the receiver that started it was cancelled while
        the listing went on (its failure would otherwise end as "Task exception was never retrieved")."""
        if listing.cancelled():
            return
        error = listing.exception()
        if isinstance(error, StorageError):
            log.warning("listing the lanes of %s failed; trying again later: %s", self.queue_name, error)
        elif error is not None:
            log.error("listing the lanes of %s failed", self.queue_name, exc_info=error)

    async def stop(self) -> None:
        """The session ends: a listing still running is cancelled, so it wakes nothing after the lease is gone."""
        listing, self._listing = self._listing, None
        if listing is not None and not listing.done():
            listing.cancel()
            await asyncio.gather(listing, return_exceptions=True)

    async def list(self) -> None:
        self.listed_at = self.clock()
        self._started_at_listing = self.started
        mid_drain = self._mid_drain()
        self._learn(await lane_queues.listed(self.s, self.queue_name), mid_drain)

    def heard(self, lane: Lane, mark: str) -> None:
        """A submit of this process marked `lane` (`shared.intake.lane_marks`): what a listing would find of it, at
        once, with no ListQueues (the lanes not named are as last listed). Taken in the watcher's context, not the
        submit's: an express page it starts is the drain session's (its span, its transactions' tally)."""
        if self._context is not None:
            found: lane_queues.Found = {lane.name: (lane, mark)}
            asyncio.get_running_loop().call_soon(self._learn, found, None, context=self._context)

    def _learn(self, found: lane_queues.Found, mid_drain: bool | None) -> None:
        if mid_drain is None:
            mid_drain = self._mid_drain()
        for _, mark in found.values():  # a mark names the batch its submit committed: no manifest read for it
            committed = committed_in(mark)
            if committed is not None and self.s.committed.get(committed[0], now=self.clock()) != committed[1]:
                self._committed(*committed)
        woken = self.order.listed(found, self.clock(), mid_drain=mid_drain)
        if woken:
            self._woke(woken, mid_drain)
