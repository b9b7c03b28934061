"""The drain engine: push-driven batch draining of one storage queue with best-effort completion.

A drain session holds the queue slot's lease, runs several receivers of up to 32 messages each,
processes chunks concurrently and settles each: delete on success, rewrite to hold only the failed
items (retried later), or park them in the poison queue. It stops when the queue is empty or its
time budget is spent; then it releases the lease and looks once more, so no wake-up is lost.
It never sleeps waiting for work.

This module is the session: its lease, its receivers and the pages they take from the queue's lanes. The
parts that read on their own: `shared.engine.held` (a message's life while held), `shared.engine.chunks`
(admitting and working a chunk), `shared.engine.settling` (what happens to the message after),
`shared.engine.lane_watch` (lanes listed mid-drain) and `shared.engine.wakeups` (every trigger event a
drainer publishes or schedules).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from opentelemetry.trace import SpanKind

from shared.core.errors import StorageError
from shared.core.events import Reason
from shared.core.lanes import Lane, LaneOrder
from shared.engine import lane_queues
from shared.engine.chunks import ChunkWork
from shared.engine.express import ExpressPages
from shared.engine.fair_slots import FairSlots
from shared.engine.lane_watch import LaneWatch
from shared.engine.limits import HandlerLimits
from shared.engine.overload import OverloadPause
from shared.engine.receiving import receive_page
from shared.engine.report import DrainReport
from shared.engine.settling import Settler
from shared.engine.wakeups import SCALE_CHECK_S, WAKE_MARGIN_MS, Wakeups
from shared.services import Services
from shared.store.leases import DrainLease
from shared.store.received import Received, utcnow
from shared.store.result_store import ResultWriter
from shared.telemetry import metering, metrics, tracing

__all__ = ["SCALE_CHECK_S", "DrainReport", "Drainer"]


log = logging.getLogger(__name__)

STORAGE_RETRY_S = 10  # storage failing: a `continue` this long after, rather than spinning on it
DEADLINE_SLACK_S = 0.001
PAUSE_MARGIN_S = 0.05  # after a pause, the chunks put back for it are visible again


class Drainer(ExpressPages):
    def __init__(
        self,
        services: Services,
        queue: str,
        *,
        slot: int = 0,
        reason: Reason = Reason.SUBMITTED,
        budget_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        trace: str | None = None,
    ) -> None:
        self.s = services
        self.trace = trace  # the traceparent of the event that woke this drainer
        self.settings = services.settings
        self.queue_name = queue
        self.slot = slot
        self.clock = clock
        self.deadline = clock() + (budget_s if budget_s is not None else self.settings.drain_budget_s)
        self.report = DrainReport(queue, slot, reason.value)
        self.wakeups = Wakeups(services, queue, slot, self.report, clock)
        self._lease_held_until: datetime | None = None  # a lease this drainer could not release expires then
        self.pause = OverloadPause()  # per lane: its handler's downstream is overloaded, no chunk of it starts
        self._storage_failed = False
        self._lease_lost = False  # the last session's lease renewal failed: it may have lapsed under the session
        self._starved = False  # a drainer past slot 0 with no share of the handler limits ends
        self.order = LaneOrder()  # the queue's lanes (`shared.core.lanes`), and whose turn it is
        self.order.add(Lane(queue))
        self.lanes = LaneWatch(
            services, queue, self.order, clock, committed=self._committed, woke=self._woke, mid_drain=self._mid_drain
        )
        self._lease: DrainLease | None = None  # while a session's receivers run
        # Receive loops and express pages, in the order started (a set's order would follow their addresses)
        self._receivers: dict[asyncio.Task[str], None] = {}
        self._loops = 0  # receive loops running
        self.quiet: dict[str, str] = {}  # the partition's quiet record, as this session read it
        self._quiet_read: tuple[dict[str, str], str | None] = ({}, None)  # and its ETag
        self._held = 0  # messages received and not yet handled
        # Lanes with an express page being received or waiting for places (its own token: a page whose chunks
        # all have places closes it, and a later page of the lane may be open by the time the first is settled).
        self._express_open: dict[str, object] = {}
        self._express_again: set[str] = set()  # lanes a listing found marked again while their page was open
        self._express_reserved = 0  # room express pages started and not yet received hold
        self._express_held = 0  # messages express pages received and not yet handled (in `_held` too)

    # -- the session -----------------------------------------------------------------------------------------

    async def run(self) -> DrainReport:
        key = (self.queue_name, self.slot)
        if key in self.s.draining:
            self.report.outcome = "busy-here"
            return self.report
        started = self.clock()
        attributes = {"queue_drain.queue": self.queue_name, "queue_drain.slot": self.slot}
        attributes["queue_drain.reason"] = self.report.reason
        with (
            tracing.span("queue_drain.drain", kind=SpanKind.CONSUMER, parent=self.trace, attributes=attributes) as span,
            metering.tally() as tally,
        ):
            try:
                await self._run(key)
            finally:
                self.report.seconds = round(self.clock() - started, 3)
                self.report.transactions = dict(sorted(tally.items()))
                tracing.set_outcome(span, self.report.outcome, ok=self.report.outcome != "storage-failed")
                span.set_attribute("queue_drain.messages", self.report.messages)
                metrics.SESSIONS.add(1, {"outcome": self.report.outcome, "reason": self.report.reason})
        self.report.log()
        return self.report

    async def _open(self) -> None:
        storage = self.s.storage
        await storage.ensure_queue(self.queue_name)
        self.state = await storage.ensure_container(self.settings.state_container)
        batches = await storage.ensure_container(self.settings.batches_container)
        self.results = ResultWriter(await storage.ensure_container(self.settings.results_container))
        poison_queue = await storage.ensure_queue(self.settings.poison_queue(self.queue_name))
        # The depth a scale-out check reads: a lane recorded quiet at its current mark holds nothing, costs no read.
        self.wakeups.attach(self.state, lambda: self.order.maybe_holding(self.quiet))
        self.chunks = ChunkWork(self.s, batches, self.clock, self.queue_name, ending=self._ending)
        self.settler = Settler(
            self.settings,
            self.queue_name,
            poison_queue,
            batches=batches,
            state=self.state,
            results=self.results,
            report=self.report,
            wakeups=self.wakeups,
        )

    async def _run(self, key: tuple[str, int]) -> None:
        await self._open()
        while True:
            self.s.draining.add(key)
            try:
                more = await self._session()
            finally:
                self.s.draining.discard(key)
            if self._lease_held_until is not None:
                # Our own lease outlives us (its release failed, or renewal did and it may still be valid): a
                # follow-up now would find it taken and stop, so the follow-up comes when it has expired.
                await self.wakeups.publish(Reason.CONTINUE, slot=self.slot, at=self._lease_held_until)
                self.report.outcome = "lease-unreleased"
                return
            if more is None:  # the lease is someone else's: they will look again after releasing it
                return
            if self._starved:  # the drainers that have a share go on; this one is not recruited again
                self.report.outcome = "starved"
                return
            if more or self._out_of_time():
                if self._storage_failed:
                    # Storage is failing: come back a little later rather than spin on it.
                    later = utcnow() + timedelta(seconds=STORAGE_RETRY_S)
                    await self.wakeups.publish(Reason.CONTINUE, slot=self.slot, at=later)
                    self.report.outcome = "storage-failed"
                elif more and not await self.wakeups.still_deserved():
                    self.report.outcome = "shrunk"  # the backlog no longer needs this slot's instance
                elif more:
                    await self.wakeups.publish(Reason.CONTINUE, slot=self.slot)
                    self.report.outcome = self._left_with_work()
                return
            # No lost wake-up: work that arrived while we held the lease is seen here.
            began_ms = int(time.time() * 1000)
            if not await self._has_visible_work():
                # A doorbell for work ready before this look began is covered by it (`shared.engine.serve`), and
                # so is one of a batch whose lane's mark this look listed, whatever the clocks say.
                self.s.looked[self.queue_name] = max(began_ms, self.s.looked.get(self.queue_name, 0))
                self.s.drained.saw(self.queue_name, self.order.committed())
                return

    def _left_with_work(self) -> str:
        """Why a session that may have left work stopped: its budget was spent, its lease was lost, or neither (an
        express page came back full, or found its lane paused or no share of the handler limits: `ExpressPages`)."""
        if self._out_of_time():
            return "budget"
        return "lease-lost" if self._lease_lost else "work-left"

    async def _session(self) -> bool | None:
        """One lease tenure. None: lease taken; True: work may remain; False: the queue looked empty."""
        lease = DrainLease(self.state, self.queue_name, self.slot, lease_s=self.settings.lease_s)
        self.wakeups.new_session()
        if not await lease.acquire(on_renew=lambda: self.wakeups.at_renewal(lease)):
            if self.report.sessions == 0:
                self.report.outcome = "lease-taken"
            return None
        self.report.sessions += 1
        await self._limit(lease)
        # Scheduled alongside the first receive, not before it: a Service Bus round trip off the wake-up path.
        watchdog = asyncio.create_task(self.wakeups.schedule_watchdog(), name=f"watchdog {self.queue_name}/{self.slot}")
        guard = asyncio.create_task(self._before_lapse(lease), name=f"lapse {self.queue_name}/{self.slot}")
        try:
            more = await self._drain(lease)
            await self._record_quiet()
        finally:
            try:  # the claim keeps the places of sync calls left running, the lease keeps renewing, till they return
                returned = await self.chunks.calls.returned(lease)
            finally:
                guard.cancel()
            if returned:
                if self.chunks.limits is not None:
                    await self.chunks.limits.release()
                await lease.release()
            if not lease.released:
                self._lease_held_until = lease.expires_at + timedelta(milliseconds=WAKE_MARGIN_MS)
        # Only a session that ends without being cancelled or crashing withdraws its watchdog.
        await watchdog
        await self.wakeups.cancel_watchdog()
        self._lease_lost = lease.lost.is_set()
        return more or self._lease_lost

    async def _before_lapse(self, lease: DrainLease) -> None:
        """Storage has not confirmed the lease for nearly its period: it may lapse, and the next holder's share of
        the handler limits would not count this session's calls. Start no more, and end the async calls running
        before it can (as the function's timeout would): their chunks are handled again, none of their items has
        an outcome. A sync handler's thread cannot be ended: its call may outlast the lease (docs/settings.md,
        HANDLER_MAX_IN_FLIGHT)."""
        await lease.lapsing()
        lease.lost.set()
        ended = self.chunks.calls.end_calls()
        log.warning("drain lease %s/%d may lapse, not renewed for %.0f s: %d async handler call(s) ended, %d sync "
                    "call(s) run on", self.queue_name, self.slot, lease.lease_s - lease.lapses_in(), ended,
                    self.chunks.calls.sync_calls)  # fmt: skip

    async def _drain(self, lease: DrainLease) -> bool:
        """Receivers start at one and grow (up to RECEIVERS) while pages come back full."""
        high_burst = self.order.high_burst * self.settings.receive_batch
        self._slots = FairSlots(self.settings.chunk_concurrency, self.queue_name, high_burst=high_burst)
        self._receivers = {}
        if not self.lanes.recently_listed():  # not again right after the look that found work
            await self.lanes.list_once()
        self._quiet_read = await lane_queues.read_quiet_versioned(self.state, self.queue_name)
        self.quiet = dict(self._quiet_read[0])
        self.order.start(self.quiet)  # a lane found empty at its mark costs this session nothing
        self._lease = lease
        self.s.lane_news[self.queue_name] = self.lanes.heard  # a submit here marks a lane: heard at once
        self._spawn_receiver(lease)
        watcher = asyncio.create_task(self.lanes.watch(), name=f"lanes {self.queue_name}/{self.slot}")
        more = False
        try:
            while self._receivers:
                done, _ = await asyncio.wait(list(self._receivers), return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._receivers.pop(task, None)
                    ending = task.result()
                    more = more or ending != "empty"
                    if ending == "failed":
                        self._storage_failed = True
                    if ending == "starved":
                        self._starved = True
        finally:
            # Cancelled (the function timed out) or failed: no receiver, listing or express page may outlive the
            # session and its lease (nothing starts one once `_lease` is None).
            self._lease = None
            if self.s.lane_news.get(self.queue_name) == self.lanes.heard:
                del self.s.lane_news[self.queue_name]
            watcher.cancel()
            for task in self._receivers:
                task.cancel()
            await asyncio.gather(watcher, self.lanes.stop(), *self._receivers, return_exceptions=True)
            await self.results.cancel()
        return more

    async def _limit(self, lease: DrainLease) -> None:
        """This session's share of HANDLER_ITEMS_PER_S and HANDLER_MAX_IN_FLIGHT (`shared.engine.limits`), if set."""
        limits = HandlerLimits.for_session(self.state, lease.blob_name, self.settings, self.clock)
        if limits.active:
            await limits.count()
            self.chunks.limits = limits

    def _spawn_receiver(self, lease: DrainLease) -> None:
        self._loops += 1
        name = f"receiver {self.queue_name}/{self.slot}/{self._loops}"
        self._receivers[asyncio.create_task(self._counted_loop(lease), name=name)] = None

    async def _counted_loop(self, lease: DrainLease) -> str:
        """A receive loop, counted while it runs: receivers grow up to RECEIVERS loops, whatever express pages (in
        `_receivers` too, until the session's wait collects them) have come and gone meanwhile."""
        try:
            return await self._receive_loop(lease)
        finally:
            self._loops -= 1

    async def _receive_loop(self, lease: DrainLease) -> str:
        """Receive pages until one comes back empty ('empty'), or out of time or lease ('more'), or storage
        fails ('failed'); each page's chunks are processed concurrently before the next receive."""
        while True:
            if self._out_of_time() or lease.lost.is_set():
                return "more"
            limits = self.chunks.limits
            if limits is not None and not limits.may_receive(self.clock()):
                # No share of the handler limits now: receive nothing (it would only wait hidden). A drainer
                # past slot 0 whose fair part is nothing ends instead, so the shares of those that go on grow;
                # one whose fair part the others still claim waits for them to yield it at their next count.
                if self.slot != 0 and limits.starved():
                    return "starved"
                await limits.wait_for_share(self.deadline)
                continue
            lane = self.order.next(self.clock())
            if lane is None:
                resumes = self.pause.soonest(self.clock())
                if resumes is not None and resumes < self.deadline:
                    # A paused lane's chunks were put back for its pause: wait it out (within the budget) rather
                    # than end the session while they are hidden.
                    await asyncio.sleep(resumes - self.clock() + PAUSE_MARGIN_S)
                    continue
                return "empty"  # every lane came back empty (each is looked at again by the session's end)
            if self.pause.active(lane, self.clock()):
                # Its downstream is overloaded: its chunks wait out the back-off, the other lanes go on.
                self.order.pause(lane, self.pause.until(lane) + PAUSE_MARGIN_S)
                continue
            try:
                page = await self._receive(lane)
            except StorageError as e:
                log.warning("receiving from %s failed; ending this session: %s", lane, e)
                return "failed"
            if not page:
                self.order.emptied(lane, self.clock())
                continue
            self.order.gave(lane)
            if len(page) == self.settings.receive_batch:
                # Grow only while the handlers keep up: a receiver whose page would wait for a chunk slot
                # only hides messages that another instance's drainer could be working on.
                if self._loops < self.settings.receivers and not self._slots.locked():
                    self._spawn_receiver(lease)
                await self.wakeups.maybe_scale_out()
            await asyncio.gather(*(self._handle(item) for item in page))

    def _ending(self) -> bool:
        """The session starts no more handler calls: its budget is spent, or its lease's renewal failed (the lease
        may lapse and the next holder's share of the handler limits would not count calls started here)."""
        lease = self._lease
        return self._out_of_time() or (lease is not None and lease.lost.is_set())

    def _out_of_time(self) -> bool:
        # Within a millisecond of the deadline counts as past it: waiting out a remainder below the clock's
        # resolution would return at once, again and again (seen in the simulation, whose clock is coarse there).
        return self.clock() >= self.deadline - DEADLINE_SLACK_S

    async def _receive(self, lane: str, most: int | None = None) -> list[Received]:
        page, visible_at = await receive_page(self.s.storage, self.settings, lane, self.chunks.limits, self.clock, most)
        if page:
            self.wakeups.note_visible(visible_at)
            self._held += len(page)
            self.report.messages += len(page)
            self.wakeups.meter.add(len(page))
        return page

    async def _record_quiet(self) -> None:
        """Lanes this session found empty at a mark the quiet record does not hold: one depth read each (hidden
        messages count), then one write of the record if any is confirmed. Best effort."""
        found: dict[str, str] = {}
        try:
            for name in self.order.to_confirm(self.quiet):
                stamp = self.order.lanes[name].stamp
                if await lane_queues.confirmed_empty(self.s, name, stamp):
                    found[name] = stamp or ""
            if found:
                lanes = set(self.order.lanes)
                await lane_queues.record_quiet(self.state, self.queue_name, found, lanes, self._quiet_read)
                self.quiet |= found
        except StorageError as e:
            log.info("lanes of %s not recorded quiet: %s", self.queue_name, e)

    async def _has_visible_work(self) -> bool:
        """After the lease is released: does any lane hold work now? A listing, then a peek per lane that may
        (not quiet at its mark: it gave work, or a submit marked it since)."""
        await self.lanes.list()
        return await lane_queues.any_visible(self.s, self.order.maybe_holding(self.quiet))

    # -- the queue's lanes (`shared.engine.lane_watch`) -------------------------------------------------------

    def _committed(self, batch_id: str, attempt: str, accepted_ms: int) -> None:
        self.s.committed.put(batch_id, attempt, now=self.clock(), accepted_ms=accepted_ms)

    def _mid_drain(self) -> bool:
        return self._lease is not None and self.report.messages > 0
