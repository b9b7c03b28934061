"""Defects in the drain engine, caught by the checks that run while a run goes on (`sim.checks.invariants`): messages
held per drainer, handler calls in flight under HANDLER_MAX_IN_FLIGHT, no receive without a share of it, high starts
in a row, virtual time that keeps moving, nothing left to the event loop's exception handler."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from shared.core.errors import StorageError
from shared.core.events import Reason
from shared.core.lanes import LaneOrder
from shared.engine import drainer, lane_queues, lane_watch, scaling, settling, wakeups
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.engine.limits import HandlerLimits
from shared.engine.settling import Settler
from shared.engine.wakeups import Wakeups
from shared.store import leases
from shared.store.leases import DrainLease
from sim.checks.wakeups import LEFT
from sim.mutants.base import Mutant, Unmatched, scoped, swap

HELD = "messages (bound 2 x RECEIVERS x RECEIVE_BATCH"
LIMITS = "handler calls in flight"


@contextmanager
def _stale_receipt_is_an_error() -> Iterator[None]:
    class Never(Exception):
        pass

    yield from swap(settling, "PopReceiptMismatch", Never)


@contextmanager
def _lease_lapses_under_a_slow_renewal() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(leases, "RENEW_TIMEOUT_S", 3600.0))
        stack.enter_context(scoped(leases, "StorageUnavailable", Unmatched))
        yield


@contextmanager
def _scale_probe_escapes() -> Iterator[None]:
    """Issue 18 item 5 (e1e9a7f): a scale-out probe that fails raises out of the receive loop, cutting the chunks
    of its page off."""

    async def maybe_scale_out(self: Wakeups) -> None:
        if self.slot != 0 or self.settings.max_drainers_per_queue == 1:
            return
        if self.clock() - self._last_scale_check < wakeups.SCALE_CHECK_S:
            return
        self._last_scale_check = self.clock()
        depth = await self._depth()
        wanted = scaling.drainers_for_depth(depth, per_drainer=self.settings.scale_out_depth,
                                            maximum=self._most_drainers())  # fmt: skip
        for slot in range(self._recruited, wanted):
            await self.publish(Reason.SCALE_OUT, slot=slot)
        self._recruited = max(self._recruited, wanted)

    yield from swap(Wakeups, "maybe_scale_out", maybe_scale_out)


@contextmanager
def _listing_failure_unretrieved() -> Iterator[None]:
    """Item 6: a lane listing's outcome is retrieved only by the receiver that awaits it; one that fails after that
    receiver was cancelled ends as "Task exception was never retrieved"."""

    async def list_once(self: lane_watch.LaneWatch) -> None:
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(self.list())
            with contextlib.suppress(StorageError):
                await asyncio.shield(self._listing)

    yield from swap(lane_watch.LaneWatch, "list_once", list_once)


@contextmanager
def _express_unbounded() -> Iterator[None]:
    """Item 8: a listing that finds a lane with new work mid-drain starts an express page for it every time, a
    whole RECEIVE_BATCH each, however many the receivers hold and whether or not one is open for that lane."""

    def woke(self: Drainer, woken: list[str], mid_drain: bool) -> None:
        lease = self._lease
        if mid_drain and lease is not None:
            for lane in woken:
                if not self.order.may_take(lane, self.clock()):  # HIGH_BURST is item 14's: kept
                    continue
                token = self._express_open[lane] = object()
                self._express_reserved += self.settings.receive_batch  # given back as the page is received
                task = asyncio.create_task(self._express(lease, lane, self.settings.receive_batch, token))
                self._receivers[task] = None

    yield from swap(Drainer, "_woke", woke)


@contextmanager
def _express_outlives_session() -> Iterator[None]:
    """Item 8: the session's receivers are cancelled and awaited before `_lease` is cleared, and a listing still
    running is not stopped, so a listing can start an express page after the sweep: it receives and hands chunks
    to the handler after the session released its lease and its share of the handler limits."""

    async def drain(self: Drainer, lease: DrainLease) -> bool:
        high_burst = self.order.high_burst * self.settings.receive_batch
        self._slots = FairSlots(self.settings.chunk_concurrency, self.queue_name, high_burst=high_burst)
        self._receivers = {}
        if not self.lanes.recently_listed():
            await self.lanes.list_once()
        self._quiet_read = await lane_queues.read_quiet_versioned(self.state, self.queue_name)
        self.quiet = dict(self._quiet_read[0])
        self.order.start(self.quiet)
        self._lease = lease
        self._spawn_receiver(lease)
        watcher = asyncio.create_task(self.lanes.watch())
        more = False
        try:
            while self._receivers:
                done, _ = await asyncio.wait(list(self._receivers), return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._receivers.pop(task, None)
                    ending = task.result()
                    more = more or ending != "empty"
                    self._storage_failed = self._storage_failed or ending == "failed"
                    self._starved = self._starved or ending == "starved"
        finally:
            watcher.cancel()
            for task in self._receivers:
                task.cancel()
            await asyncio.gather(watcher, *self._receivers, return_exceptions=True)
            self._lease = None
            await self.results.cancel()
        return more

    yield from swap(Drainer, "_drain", drain)


@contextmanager
def _receive_without_share() -> Iterator[None]:
    """Item 9: a drainer receives whether or not its claim on the handler limits has room (its chunks wait
    hidden for a place), and recruiting is not held to the drainers the limits can feed."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(HandlerLimits, "may_receive", lambda self, now: True))
        stack.enter_context(scoped(wakeups, "drainers_fed", lambda **kwargs: None))
        yield


@contextmanager
def _high_burst_unbounded() -> Iterator[None]:
    """Item 14: high chunks take places before normal ones however many went in a row, and an express page of a
    high lane is taken whatever the lanes' order says (HIGH_BURST held for pages from the receivers only)."""

    class Unbounded(FairSlots):
        def __init__(self, places: int, partition: str, *, high_burst: int = 0) -> None:
            super().__init__(places, partition, high_burst=10**9)

    with contextlib.ExitStack() as stack:
        stack.enter_context(scoped(drainer, "FairSlots", Unbounded))
        stack.enter_context(scoped(LaneOrder, "may_take", lambda self, name, now: name in self.lanes))
        yield


@contextmanager
def _sub_resolution_wait() -> Iterator[None]:
    """1f3838f reverted: a session within a millisecond of its deadline is not yet out of time, so its wait for a
    share of the handler limits waits out a remainder below the clock's resolution, again and again."""
    yield from swap(drainer, "DEADLINE_SLACK_S", 0.0)


# ---- the audit's hand-made reverts (issue 37 item 3) ---------------------------------------------------------


@contextmanager
def _delete_before_record() -> Iterator[None]:
    """A chunk done in one go has its message deleted before its result record is written: a crash in between
    loses its outcomes for good (the order "poison, record, message" put back the other way)."""
    settle = Settler.settle

    async def deleting_first(self: Settler, item: Any, msg: Any, items: Any, positions: Any, s: Any) -> None:
        if s.complete and not s.poison:
            await self.delete(item)
            await self.results.write(s.record)
            self.report.batches.add(msg.header.batch_id)
            self.report.items_ok += len(s.record.ok)
            self.report.chunks_done += 1
            return
        await settle(self, item, msg, items, positions, s)

    yield from swap(Settler, "settle", deleting_first)


class _RenewOncePerLease:
    """`asyncio` as `shared.store.leases` sees it, but a renewal's wait of a third of the lease is the whole lease."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(delay * 3 if delay > leases.RENEW_RETRY_S else delay, result)


@contextmanager
def _lease_renewed_once_per_period() -> Iterator[None]:
    """A drain lease renewed once per lease period, not every third of it: it lapses as it is renewed, and
    another drainer takes the slot while this one's chunks are still in the handler."""
    yield from swap(leases, "asyncio", _RenewOncePerLease())


@contextmanager
def _no_continuation_at_budget() -> Iterator[None]:
    """A session that runs out of its budget (or loses its lease) with work left publishes no continuation: the
    queue waits for a look or the timer."""
    publish = Wakeups.publish

    async def quiet(self: Wakeups, reason: Reason, *, slot: int = 0, at: datetime | None = None) -> int | None:
        if reason is Reason.CONTINUE and at is None:
            return None
        return await publish(self, reason, slot=slot, at=at)

    yield from swap(Wakeups, "publish", quiet)


MUTANTS = [
    Mutant("scale-probe-escapes", "e1e9a7f (issue 18 item 5)", "a failed scale-out probe ends the receive loop",
           _scale_probe_escapes, family="storage",
           why="a failed probe ends the session with its page unhandled; the page returns after its visibility timeout "
               "with an attempt counted, which no invariant bounds under faults"),
    Mutant("listing-failure-unretrieved", "daedeca (issue 26 item 6)", "a lane listing that fails after its "
           "receiver was cancelled is never retrieved", _listing_failure_unretrieved, family="storage",
           expect="exception handler",
           invariant="nothing reaches the event loop's exception handler",
           why="since 01136fe the session's end cancels a lane listing still running (`LaneWatch.stop`): daedeca's "
               "callback is a second guard"),
    Mutant("express-unbounded", "01136fe (issue 26 item 8)", "an express page per listing that finds a lane, a "
           "whole page each, beside the receivers' pages", _express_unbounded, family="volume", expect=HELD,
           seeds=20,
           invariant='messages held by one drainer'),
    Mutant("express-outlives-session", "01136fe (issue 26 item 8)", "an express page started by a listing during "
           "the session's last sweep receives after the lease and the limits' share are given back",
           _express_outlives_session, family="limits", expect=LIMITS, seeds=100,
           invariant='handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`',
           why="the window is the session's last sweep (a few milliseconds) with a listing answering inside it; in 100 "
               "seeds none did"),
    Mutant("receive-without-share", "01136fe (issue 26 item 9)", "a drainer without a share of "
           "HANDLER_MAX_IN_FLIGHT receives anyway; recruits beyond what the limits feed", _receive_without_share,
           family="limits", expect="no share of HANDLER_MAX_IN_FLIGHT", seeds=100,
           invariant='no receive without a share of `HANDLER_MAX_IN_FLIGHT`'),
    Mutant("high-burst-unbounded", "01136fe (issue 26 item 14)", "high chunks start before normal ones without "
           "the HIGH_BURST bound; express pages ignore it", _high_burst_unbounded, family="priority",
           expect="high chunks started in a row", seeds=100,
           invariant='high starts in a row'),
    Mutant("stale-receipt-is-an-error", "a8264ba (found here)", "a delete or update with a stale pop receipt takes "
           "the generic storage-error path", _stale_receipt_is_an_error, family="storage",
           why='the message is left to its holder either way; only a log line differs'),
    Mutant("lease-lapses-under-renewal", "c123cbc (found here)", "a renewal that fails or hangs lets the lease lapse "
           "under a chunk still in the handler", _lease_lapses_under_a_slow_renewal, family="limits", expect=LIMITS,
           seeds=100,
           invariant='handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`',
           why="caught by limits seed 23 until the churn (cf77bf1) redrew half the limits seeds; not in 100 seeds on "
           "3e30b1b. 8397b3f (a drainer ends its async calls before its lease can lapse) now keeps the same promise "
           "when renewals fail; plan: hunt churn seeds whose renewals hang rather than fail"),
    Mutant("sub-resolution-wait", "1f3838f (found here)", "a session in its last millisecond waits out remainders "
           "below the clock's resolution", _sub_resolution_wait, family="limits", seeds=100,
           invariant="virtual time keeps moving",
           why="the spin needs a session's last wait for a share of the handler limits to end just past a power of "
               "two of virtual seconds (16, 32, 64, 128...) on an instance whose skewed clock reads just under it: "
               "the remainder is then below half the loop clock's precision, the timer is due at the same instant "
               "and the wait returns at once, forever (about 1 in 700 such last waits over random times and skews); "
               "`limits` seed 23 met it until the world's schedules moved. On a real host the clock moves on: the "
               "spin lasts a clock tick. Plan: none short of placing a deadline there"),
    # The audit's hand-made reverts.
    Mutant("delete-before-record", "the first design (settling's order)", "a chunk's message deleted before its "
           "result record", _delete_before_record, family="storage", expect="pending",
           invariant="every accepted batch completes"),
    Mutant("lease-renewed-once-per-period", "the first design (leases)", "a drain lease renewed once per lease "
           "period", _lease_renewed_once_per_period, family="limits", expect=LIMITS, seeds=100,
           invariant="handler calls in flight never above `HANDLER_MAX_IN_FLIGHT`"),
    Mutant("no-continuation-at-budget", "the first design (the drainer's continuation)", "no continuation when a "
           "session runs out of budget", _no_continuation_at_budget, family="platform", expect=LEFT,
           invariant="no lost wake-up: work a drain leaves behind has an event (`sim.checks.wakeups`)"),
]  # fmt: skip
