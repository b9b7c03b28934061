"""The drain engine's trigger events: every wake-up a drainer leaves behind, and the drainers it recruits.

`continue` and `scale-out` go now; `retry-due` when a message it hid reappears; `watchdog` past its lease and
every visibility it set, kept ahead while the session lasts and cancelled on a clean exit. A probe of the
queue's depth decides how many drainers the queue deserves (`shared.engine.scaling`), and, while fast, the drainer's
message rate is written on its lease and the queue's summed against its scalability target (`shared.engine.rates`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import StorageError, TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine import lane_queues
from shared.engine.limits import drainers_fed
from shared.engine.rates import REPORT_FROM_PER_S, RateMeter, advice
from shared.engine.report import DrainReport
from shared.engine.scaling import deserves_slot, drainers_for_depth, wakeup_for
from shared.services import Services
from shared.store.leases import DrainLease, queue_leases
from shared.store.received import epoch_ms, utcnow

log = logging.getLogger("shared.engine.drainer")  # one logger for the whole engine

SCALE_CHECK_S = 5.0
RETRY_WINDOW_MS = 5_000
# A wake-up is scheduled this long after the time its message becomes visible again: the visibility is set by
# storage's clock and the event's enqueue time by Service Bus's, both from ours, so they may differ by a
# second or two; an early wake-up would find nothing and leave the message waiting for the fallback.
WAKE_MARGIN_MS = 3_000
WATCHDOG_MARGIN_S = 5


class Wakeups:
    """One drainer's events, and what they are computed from (its slot, its queue's depth, what it hid)."""

    def __init__(
        self, services: Services, queue_name: str, slot: int, report: DrainReport, clock: Callable[[], float]
    ) -> None:
        self.s, self.settings = services, services.settings
        self.queue_name, self.slot, self.report, self.clock = queue_name, slot, report, clock
        self.state: ContainerClient | None = None
        self._lanes: Callable[[], list[str]] = lambda: [queue_name]
        self._scheduled: list[int] = []  # retry-due events scheduled by this drainer (wall clock, ms)
        self._latest_visible_ms = 0  # the latest time any message this drainer hid becomes visible again
        # (sequence number, due on the monotonic clock, due on the wall clock in ms)
        self._watchdog: tuple[int, float, int] | None = None
        self._recruited = 1
        self._last_scale_check = -math.inf
        self.meter = RateMeter(clock)
        self._rate_written = 0.0
        self._rate_warned = False

    def attach(self, state: ContainerClient, lanes: Callable[[], list[str]]) -> None:
        """`lanes`: the names of the queue's lanes that may hold messages, as the drainer knows them now (not
        those recorded quiet at their current mark: with 1,000 tenants a scale-out check read every lane, 1,001
        reads every 5 s while a backlog drained)."""
        self.state, self._lanes = state, lanes

    def new_session(self) -> None:
        """A lease tenure starts: the rate is measured from now."""
        self.meter = RateMeter(self.clock)

    # -- events now and later ---------------------------------------------------------------------------------

    def _event(self, reason: Reason, slot: int = 0) -> TriggerEvent:
        return TriggerEvent(self.settings.account_name, self.queue_name, reason, slot=slot)

    async def publish(self, reason: Reason, *, slot: int = 0, at: datetime | None = None) -> int | None:
        try:
            number = await self.s.publisher.publish(self._event(reason, slot), at=at)
        except TriggerUnavailable as e:
            log.warning("could not publish %s for %s (the fallback will cover): %s", reason.value, self.queue_name, e)
            return None
        self.report.events.append(reason.value if not slot else f"{reason.value}:{slot}")
        return number

    async def wake_at(self, visible_ms: int) -> None:
        """A retry-due event after `visible_ms`, when a message this drainer leaves behind reappears, unless one
        already scheduled covers it (scheduled when the message is written, so a crash later loses nothing)."""
        at_ms = wakeup_for(visible_ms, self._scheduled, window_ms=RETRY_WINDOW_MS, margin_ms=WAKE_MARGIN_MS)
        if at_ms is None:
            return
        if await self.publish(Reason.RETRY_DUE, at=datetime.fromtimestamp(at_ms / 1000, timezone.utc)) is not None:
            self._scheduled.append(at_ms)

    def note_visible(self, at_ms: int) -> None:
        self._latest_visible_ms = max(self._latest_visible_ms, at_ms)

    # -- how many drainers the queue deserves -------------------------------------------------------------------

    async def maybe_scale_out(self) -> None:
        if self.slot != 0 or self.settings.max_drainers_per_queue == 1:
            return
        if self.clock() - self._last_scale_check < SCALE_CHECK_S:
            return
        self._last_scale_check = self.clock()
        try:
            depth = await self._depth()
        except StorageError as e:  # a probe is best effort: the receive loop goes on, the next probe may work
            log.warning("scale-out probe of %s failed; trying again later: %s", self.queue_name, e)
            return
        wanted = drainers_for_depth(depth, per_drainer=self.settings.scale_out_depth, maximum=self._most_drainers())
        for slot in range(self._recruited, wanted):
            await self.publish(Reason.SCALE_OUT, slot=slot)
        self._recruited = max(self._recruited, wanted)

    async def still_deserved(self) -> bool:
        """Whether this slot should go on at today's depth (slot 0 always does; a failed probe says yes)."""
        if self.slot == 0:
            return True
        try:
            depth = await self._depth()
        except StorageError as e:
            log.warning("depth of %s unknown; slot %d goes on: %s", self.queue_name, self.slot, e)
            return True
        return deserves_slot(self.slot, depth, per_drainer=self.settings.scale_out_depth, maximum=self._most_drainers())

    def _most_drainers(self) -> int:
        """MAX_DRAINERS_PER_QUEUE, or fewer: no more than the handler limits can keep busy."""
        settings = self.settings
        fed = drainers_fed(
            items_per_s=settings.handler_items_per_s or None,
            in_flight=settings.handler_max_in_flight or None,
            chunk_items=settings.chunk_max_items,
            horizon_s=settings.visibility_timeout_s / 2,
        )
        return settings.max_drainers_per_queue if fed is None else min(fed, settings.max_drainers_per_queue)

    async def _depth(self) -> int:
        """The backlog of every lane that may hold messages together (one read each)."""
        return sum([await lane_queues.depth(self.s, name) for name in self._lanes()])

    # -- the watchdog ----------------------------------------------------------------------------------------------

    def _watchdog_delay_s(self) -> int:
        """Past the lease's expiry and past the latest visibility this drainer set (with one more visibility
        period of room, so the extensions that follow do not each move it)."""
        visible_in_s = math.ceil(max(0, self._latest_visible_ms - epoch_ms()) / 1000)
        room = self.settings.visibility_timeout_s
        return max(self.settings.lease_s, room, visible_in_s + room) + WATCHDOG_MARGIN_S

    async def schedule_watchdog(self) -> None:
        delay = self._watchdog_delay_s()
        number = await self.publish(Reason.WATCHDOG, slot=self.slot, at=utcnow() + timedelta(seconds=delay))
        if number is None:
            return  # the old watchdog (if any) stays: it is cancelled only once its successor exists
        previous = self._watchdog
        self._watchdog = (number, self.clock() + delay, epoch_ms() + delay * 1000)
        if previous is not None:
            await self._cancel(previous[0])

    async def at_renewal(self, lease: DrainLease) -> None:
        """Called at each lease renewal."""
        await self._keep_watchdog_ahead()
        await self._watch_rate(lease)

    async def _keep_watchdog_ahead(self) -> None:
        """A long session keeps its watchdog ahead of a possible crash, and of every message it has hidden (a
        watchdog that fires before they reappear finds nothing and ends)."""
        if (
            self._watchdog is None
            or self._watchdog[1] - self.clock() < self.settings.lease_s
            or self._watchdog[2] < self._latest_visible_ms + WATCHDOG_MARGIN_S * 1000
        ):
            await self.schedule_watchdog()

    async def cancel_watchdog(self) -> None:
        if self._watchdog is not None:
            await self._cancel(self._watchdog[0])
            self._watchdog = None

    async def _cancel(self, number: int) -> None:
        try:
            await self.s.publisher.cancel(number)
        except TriggerUnavailable as e:
            log.info("could not cancel scheduled watchdog %d (it will find nothing to do): %s", number, e)

    # -- the queue's message rate -------------------------------------------------------------------------------

    async def _watch_rate(self, lease: DrainLease) -> None:
        """Write this drainer's message rate on its lease while it matters; slot 0 then sums the queue's and
        says when it nears the queue's scalability target (the rate behind /api/queues' advice)."""
        rate = self.meter.sample()
        if rate < REPORT_FROM_PER_S and self._rate_written < REPORT_FROM_PER_S:
            return
        await lease.publish_rate(rate)
        self._rate_written = rate
        if self.slot != 0 or rate < REPORT_FROM_PER_S or self._rate_warned or self.state is None:
            return
        try:
            leases = await queue_leases(self.state, self.queue_name, fresh_s=self.settings.lease_s)
        except StorageError as e:
            log.debug("rates of %s not read: %s", self.queue_name, e)
            return
        said = advice(self.queue_name, leases.rate_per_s, len(self.settings.partition_queues()))
        if said is not None:
            log.warning("%s", said)
            self._rate_warned = True
