"""Express pages: a lane a listing finds with new work mid-drain gets one page received at once, not after the
pages the drainer's receivers hold, within a hold of their own beside the receivers' (RECEIVERS x RECEIVE_BATCH
each, so a drainer never holds more than twice that), in the lanes' order (HIGH_BURST), and never past the session.

Their own hold, not what the receivers leave of one: behind a deep backlog and a slow handler the receivers hold
their whole share all the time (every page waiting for places), so a newcomer's lane got no express page and
waited for a receiver to come round after its page of the backlog's chunks: seconds (`make bench-fairness-parts`).

A mixin of `shared.engine.drainer.Drainer`, which owns the session these methods run in; the attributes below
are the drainer's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from shared.core.errors import StorageError
from shared.core.lanes import LaneOrder
from shared.engine.held import HeldMessages
from shared.store.leases import DrainLease
from shared.store.received import Received

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine


class ExpressPages(HeldMessages):
    slot: int
    order: LaneOrder
    _lease: DrainLease | None
    _receivers: dict[asyncio.Task[str], None]  # in the order started
    _express_open: dict[str, object]  # lanes with a page being received or waiting for places: its token
    _express_again: set[str]  # lanes a listing found marked again while their page was open
    _express_reserved: int  # room express pages started and not yet received hold
    _express_held: int  # messages express pages received and not yet handled (in `_held` too)

    def _out_of_time(self) -> bool:
        raise NotImplementedError

    async def _receive(self, lane: str, most: int | None = None) -> list[Received]:
        raise NotImplementedError

    def hold_max(self) -> int:
        """The most messages this drainer's receivers hold at once, and its express pages beside them: a drainer
        never holds more than twice this (256 at the defaults)."""
        return self.settings.receivers * self.settings.receive_batch

    def _woke(self, woken: list[str], mid_drain: bool) -> None:
        lease = self._lease
        if mid_drain and lease is not None:
            log.info("lanes of %s with new work: %s", self.queue_name, ", ".join(woken))
            for lane in woken:  # now, not after the pages every receiver has in hand
                if lane in self._express_open:
                    # Its next page as soon as this one's chunks have places: a receive already under way may
                    # have missed the new work, and the receivers would come round to it only after their pages.
                    self._express_again.add(lane)
                    continue
                self._start_express(lease, lane)

    def _start_express(self, lease: DrainLease, lane: str) -> None:
        """At most one express page per lane waiting for places at a time, within the express pages' hold_max, in
        the lanes' order (HIGH_BURST); a lane not taken here stays due for the receivers."""
        # Express pages not yet received hold their room too: one listing that wakes several lanes must not give
        # each the whole of it (the simulation's random seed 423: two pages beside a receiver's, 3 held of 2).
        room = min(self.hold_max() - self._express_held - self._express_reserved, self.settings.receive_batch)
        if room <= 0 or not self.order.may_take(lane, self.clock()):
            return
        token = self._express_open[lane] = object()
        self._express_reserved += room
        task = asyncio.create_task(self._express(lease, lane, room, token), name=f"express {lane}/{self.slot}")
        self._receivers[task] = None

    def _express_placed(self, lane: str, token: object) -> None:
        """The express page `token` of `lane` has its chunks placed (or ended): the lane's next may start, and does
        at once if a listing found it marked again meanwhile."""
        if self._express_open.get(lane) is not token:
            return
        del self._express_open[lane]
        lease = self._lease
        if lane in self._express_again:
            self._express_again.discard(lane)
            if lease is not None and not lease.lost.is_set():
                self._start_express(lease, lane)

    async def _handle_express(self, item: Received, placed: Callable[[], None]) -> None:
        try:
            await self._handle(item, placed)
        finally:
            self._express_held -= 1

    async def _express(self, lease: DrainLease, lane: str, room: int, token: object) -> str:
        """One page from a lane a listing found with new work while the receivers are busy with their pages: a
        small tenant's batch waits for a listing, not for the pages another tenant's receivers hold."""
        reserved = room  # given back once the page is received (then counted in `_held`) or not taken
        try:
            limits = self.chunks.limits
            if self._out_of_time() or lease.lost.is_set() or self.pause.active(lane, self.clock()):
                return "more"
            if limits is not None and not limits.may_receive(self.clock()):
                return "more"
            try:
                page = await self._receive(lane, room)
            except StorageError as e:
                log.warning("receiving from %s failed: %s", lane, e)
                return "more"
            finally:
                self._express_reserved -= reserved
                reserved = 0
            self._express_held += len(page)
            full = len(page) == min(room, self.settings.receive_batch)
            if not full:  # it held less than a page: the receivers need not look until its next mark
                self.order.emptied(lane, self.clock())
            if not page:
                return "empty"
            self.order.gave(lane)
            waiting = len(page)

            def placed() -> None:
                nonlocal waiting
                waiting -= 1
                if waiting == 0:
                    self._express_placed(lane, token)

            await asyncio.gather(*(self._handle_express(item, placed) for item in page))
            return "more" if full else "empty"
        finally:
            self._express_reserved -= reserved
            self._express_placed(lane, token)
