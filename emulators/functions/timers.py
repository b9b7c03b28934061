"""Timer triggers: NCRONTAB schedules, a blob-lease singleton per function, the schedule monitor.

Only the host holding `locks/{hostId}/Host.Functions.{name}.Listener` runs a timer's listener; others retry
every `listenerLockRecoveryPollingInterval`. With the monitor on, `timers/.../status` records Last/Next and
a start after a missed Next runs the function at once with `past_due=True` (before runOnStartup).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.functions.timer import TimerRequest
from azure.storage.blob.aio import BlobLeaseClient

from emulators.functions import ncrontab
from emulators.functions.config import SingletonOptions
from emulators.functions.hoststorage import HostStorage, listener_lock_blob, timer_status_blob
from emulators.functions.indexing import FunctionSpec
from emulators.functions.invoke import Invoker

log = logging.getLogger(__name__)

TIMER_TRIGGER = "timerTrigger"
MONITOR_MIN_INTERVAL = timedelta(minutes=1)
NEVER = datetime.min.replace(tzinfo=UTC)  # .NET's default(DateTime), "never ran"
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class TimerTrigger:
    spec: FunctionSpec
    schedule: ncrontab.CronSchedule
    run_on_startup: bool
    use_monitor: bool


def timer_trigger(spec: FunctionSpec, now: datetime) -> TimerTrigger:
    schedule = ncrontab.parse(str(spec.trigger.get("schedule", "")))
    explicit = spec.trigger.get("useMonitor")
    return TimerTrigger(
        spec=spec,
        schedule=schedule,
        run_on_startup=bool(spec.trigger.get("runOnStartup") or False),
        use_monitor=monitor_enabled(explicit, schedule, now),
    )


def monitor_enabled(explicit: bool | None, schedule: ncrontab.CronSchedule, now: datetime) -> bool:
    """An explicit useMonitor wins; unset, it is on only for schedules at most once a minute."""
    if explicit is not None:
        return bool(explicit)
    first = schedule.next_occurrence(now)
    return schedule.next_occurrence(first) - first >= MONITOR_MIN_INTERVAL


@dataclass(frozen=True)
class ScheduleStatus:
    last: datetime
    next: datetime
    last_updated: datetime

    def to_json(self) -> dict[str, str]:
        return {"Last": _iso(self.last), "Next": _iso(self.next), "LastUpdated": _iso(self.last_updated)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScheduleStatus | None:
        try:
            return cls(_parse(doc["Last"]), _parse(doc["Next"]), _parse(doc["LastUpdated"]))
        except (KeyError, TypeError, ValueError):
            return None


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat() if when != NEVER else "0001-01-01T00:00:00+00:00"


def _parse(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def check_past_due(
    status: ScheduleStatus | None, schedule: ncrontab.CronSchedule, now: datetime
) -> tuple[timedelta, ScheduleStatus | None]:
    """How late the recorded Next is, and a status to write first (first run or a changed schedule)."""
    if status is None:
        return timedelta(0), ScheduleStatus(NEVER, schedule.next_occurrence(now), now)
    if status.last != NEVER:
        expected = schedule.next_occurrence(status.last)
    elif status.last_updated != NEVER:
        expected = schedule.next_occurrence(status.last_updated)
    else:
        expected = status.next
    if expected != status.next:
        return timedelta(0), ScheduleStatus(NEVER, schedule.next_occurrence(now), now)
    return max(now - status.next, timedelta(0)), None


async def wait_any(events: Sequence[asyncio.Event], timeout_s: float | None) -> bool:
    """Wait until one event is set (True) or the timeout passes (False)."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return bool(done)


class TimerListener:
    """Runs one timer function while this host holds its listener lease."""

    def __init__(
        self,
        trigger: TimerTrigger,
        storage: HostStorage,
        invoker: Invoker,
        host_id: str,
        singleton: SingletonOptions,
        clock: Clock = utc_now,
    ) -> None:
        self.trigger = trigger
        self.storage = storage
        self.invoker = invoker
        self.singleton = singleton
        self.clock = clock
        self.lock_blob = listener_lock_blob(host_id, trigger.spec.name)
        self.status_blob = timer_status_blob(host_id, trigger.spec.name)

    @property
    def name(self) -> str:
        return self.trigger.spec.full_name

    async def run(self, stopping: asyncio.Event) -> None:
        waiting_logged = False
        while not stopping.is_set():
            lease = await self.storage.try_acquire_lease(self.lock_blob, self.singleton.listener_lock_period_s)
            if lease is None:
                if not waiting_logged:
                    log.info("'%s': another host holds %s; this host stands by", self.name, self.lock_blob)
                    waiting_logged = True
                await wait_any([stopping], self.singleton.listener_lock_recovery_polling_interval_s)
                continue
            waiting_logged = False
            await self._run_holding(lease, stopping)

    async def _run_holding(self, lease: BlobLeaseClient, stopping: asyncio.Event) -> None:
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._renew(lease, lost, stopping))
        log.info("'%s': singleton lease acquired (%s); listener started", self.name, self.lock_blob)
        try:
            await self._schedule_loop(stopping, lost)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            if not lost.is_set():
                await self.storage.release(lease)
        if lost.is_set():
            log.warning("'%s': singleton lease lost; listener stopped until it can be taken again", self.name)

    async def _renew(self, lease: BlobLeaseClient, lost: asyncio.Event, stopping: asyncio.Event) -> None:
        interval = self.singleton.listener_lock_period_s / 2
        while not await wait_any([stopping], interval):
            if not await self.storage.renew(lease):
                lost.set()
                return

    async def _schedule_loop(self, stopping: asyncio.Event, lost: asyncio.Event) -> None:
        status = await self._startup(stopping)
        while not stopping.is_set() and not lost.is_set():
            due = self.trigger.schedule.next_occurrence(self.clock())
            if await self._sleep_until(due, [stopping, lost]):
                return
            status = await self._fire(status, past_due=False)

    async def _sleep_until(self, due: datetime, events: Sequence[asyncio.Event]) -> bool:
        """Sleep until the wall clock reaches `due` (the loop's clock may wake early); True if an event is set."""
        while (remaining := (due - self.clock()).total_seconds()) > 0:
            if await wait_any(events, remaining):
                return True
        return False

    async def _startup(self, stopping: asyncio.Event) -> ScheduleStatus | None:
        self._log_next_occurrences()
        status, past_due = await self._check_monitor()
        if stopping.is_set():
            return status
        if past_due > timedelta(0):
            log.info("'%s' is past due by %s; running it now", self.name, past_due)
            return await self._fire(status, past_due=True)
        if self.trigger.run_on_startup:
            return await self._fire(status, past_due=False)
        return status

    async def _check_monitor(self) -> tuple[ScheduleStatus | None, timedelta]:
        if not self.trigger.use_monitor:
            return None, timedelta(0)
        doc = await self.storage.read_json(self.status_blob)
        recorded = ScheduleStatus.from_json(doc) if doc else None
        past_due, replacement = check_past_due(recorded, self.trigger.schedule, self.clock())
        if replacement is not None:
            await self.storage.write_json(self.status_blob, replacement.to_json())
            return replacement, past_due
        return recorded, past_due

    async def _fire(self, status: ScheduleStatus | None, *, past_due: bool) -> ScheduleStatus | None:
        fired_at = self.clock()
        request = TimerRequest(
            past_due=past_due,
            schedule_status=status.to_json() if status else {},
            schedule={"AdjustForDST": True},
        )
        await self.invoker.invoke(self.trigger.spec, request, f"Timer fired at {fired_at.isoformat()}")
        # As the real listener records it: Last = when it fired, Next = the occurrence after that.
        updated = ScheduleStatus(fired_at, self.trigger.schedule.next_occurrence(fired_at), self.clock())
        if self.trigger.use_monitor:
            try:
                await self.storage.write_json(self.status_blob, updated.to_json())
            except Exception:
                log.exception("'%s': writing the schedule status failed", self.name)
        return updated

    def _log_next_occurrences(self, count: int = 5) -> None:
        when, upcoming = self.clock(), []
        for _ in range(count):
            when = self.trigger.schedule.next_occurrence(when)
            upcoming.append(when.isoformat())
        log.info(
            "The next %d occurrences of the '%s' schedule (Cron: '%s') will be: %s",
            count,
            self.name,
            self.trigger.schedule.expression,
            ", ".join(upcoming),
        )
