"""The fallback's looks while a queue holds messages: one chain of scheduled `look` events per queue.

The fallback timer is the last net and ticks rarely (`FALLBACK_SCHEDULE`, every 6 hours by default), so an idle
app on Flex Consumption scales to zero between ticks and pays the host's own locks only for the few minutes
an instance lingers after each (BENCHMARKS.md, "Idle per app"). What the fallback guarantees, that a queue
holding messages is looked at within the back-off interval whatever became of its doorbells, retries and
watchdogs, is kept between ticks by this chain:

- whoever puts work into a queue (a submit, a replay) arms the chain after storing it: a `look` event
  scheduled on Service Bus `BACKOFF_FLOOR_MS` ahead, unless a look is already armed;
- a look that finds the queue holding messages acts as the timer's look does (a `fallback` event if nobody
  drains it, or a drain right there if Service Bus refuses the event) and arms the next look: at the floor
  while a drainer works or was just called, growing to `BACKOFF_CEILING_MS` while the messages only wait
  out a retry delay;
- a look that finds every lane of the queue empty (the depth counts invisible messages too) ends the
  chain: a queue with no message has nothing to lose, and the next work to come arms it again. It writes
  the chain unarmed before it reads the depth, so a submit racing it either sees the chain unarmed and arms
  it, or enqueued before that read and is seen by it.

One chain per queue: the state blob (`looks/{queue}.json`) names the armed look's token, and a `look` event
whose token is not the blob's is a leftover (of a lost race, or of a chain re-armed after its look was
late beyond `GRACE_MS`) and does nothing. The event is scheduled before the blob names it, so the blob
never names a look that was not sent; an event sent for a write that then lost its race is cancelled, or
arrives and is ignored. A look the blob could name only once it was due (storage slow) may have come first and
been ignored: another is sent, farther ahead, and named over it.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from shared.batch.batches import is_batch_id
from shared.core import layout
from shared.core.backoff import PollPolicy, capped_exponential_ms, decreased_ms, jittered_ms
from shared.core.errors import PreconditionFailed, ResourceConflict, ResourceMissing, StorageError, TriggerUnavailable
from shared.core.events import Reason, TriggerEvent
from shared.engine.wakeups import WAKE_MARGIN_MS
from shared.services import Services
from shared.store.received import epoch_ms
from shared.store.storage import read_json, write_json
from shared.watch import inspect

log = logging.getLogger(__name__)

# A look due this long ago that has not run is taken as lost (Service Bus dead-lettered it, or its instance
# died before it could arm the next) and the chain is armed afresh. Longer than a look can be late for good
# reasons: a cold start (users report up to about 2 minutes) and a drain that holds the instance's one
# execution slot, which ends at DRAIN_BUDGET_S (4 minutes by default).
GRACE_MS = 10 * 60 * 1000
LATE_SENDS = 3  # looks sent again at most, each farther ahead, when the blob could name one only once it was due


@dataclass(frozen=True)
class Chain:
    """A queue's look chain as its blob holds it (pure)."""

    token: str | None = None  # the armed look's, or None once a look found the queue empty
    look_at_ms: int | None = None
    interval_ms: int = 0
    ended_by: str | None = None  # the look that unarmed it: its redelivery goes on from the ended write

    def armed(self, now_ms: int) -> bool:
        return self.token is not None and self.look_at_ms is not None and now_ms < self.look_at_ms + GRACE_MS

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "look_at_ms": self.look_at_ms,
            "interval_ms": self.interval_ms,
            "ended_by": self.ended_by,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Chain:
        if not isinstance(doc, dict):
            return cls()
        token, at, interval, ended = (doc.get(k) for k in ("token", "look_at_ms", "interval_ms", "ended_by"))
        return cls(
            token=token if isinstance(token, str) else None,
            look_at_ms=at if isinstance(at, int) else None,
            interval_ms=interval if isinstance(interval, int) else 0,
            ended_by=ended if isinstance(ended, str) else None,
        )

    def view(self, now_ms: int) -> dict[str, Any]:
        """What `/api/queues` shows of it."""
        armed = self.armed(now_ms)
        return {
            "armed": armed,
            "next_look_in_ms": max(0, self.look_at_ms - now_ms) if armed and self.look_at_ms else None,
        }


def is_token(value: str | None) -> bool:
    """A look's token is a uuid4 in hex, the shape of a batch id."""
    return value is not None and is_batch_id(value)


async def read(services: Services, queue: str) -> tuple[Chain, str | None]:
    """The chain and its blob's ETag (None: no blob yet)."""
    container = await services.storage.ensure_container(services.settings.state_container)
    try:
        doc, etag = await read_json(container, layout.look_blob(queue))
    except ResourceMissing:
        return Chain(), None
    return Chain.from_json(doc), etag


async def arm(services: Services, queue: str, at: datetime | None = None) -> bool:
    """Arm `queue`'s chain unless a look is armed already within the floor (or, with `at`, before that moment):
    True if this call armed it. Raises
    `TriggerUnavailable` when Service Bus cannot take the look (the caller defers it), `StorageError` when the
    blob cannot be read or written. `at`: the first look not before then (work hidden until then, a batch's
    not_before); a look armed that far ahead is brought forward by work visible sooner."""
    chain, etag = await read(services, queue)
    policy = services.backoff.policy
    now_ms = epoch_ms()
    first_ms = max(policy.floor_ms, int(at.timestamp() * 1000) - now_ms) if at is not None else policy.floor_ms
    # A look armed far ahead (its interval grew while messages only waited out a retry delay, or it waits for a
    # not_before) is brought back to the first look this work needs; the far look becomes a leftover.
    soon_ms = now_ms + jittered_ms(first_ms, jitter=policy.jitter, u=1.0)
    if chain.armed(now_ms) and chain.look_at_ms is not None and chain.look_at_ms <= soon_ms:
        return False
    return await schedule(services, queue, chain, etag, first_ms)


async def watch(services: Services, rang: TriggerEvent, at: datetime | None = None) -> None:
    """After work was stored in `rang.queue` and its doorbell `rang`: arm the queue's chain (its first look at
    `at`, for work hidden until then). With Service Bus away or storage failing this process tries again
    (`shared.bus.deferrals`), and the timer covers a process that dies first. The chain is the net for a doorbell
    lost after it was sent: leaving a storage failure to the timer left an accepted batch whose doorbell was lost
    unlooked-at for up to its period, 6 hours (the simulation's storage seed 110)."""
    try:
        await arm(services, rang.queue, at)
    except (TriggerUnavailable, StorageError) as e:
        log.warning("look chain of %s not armed (this process tries again): %s", rang.queue, e)
        services.deferred.add(rang, rang=True, at=at)


async def schedule(services: Services, queue: str, chain: Chain, etag: str | None, interval_ms: int) -> bool:
    """Send the next look `interval_ms` (jittered) ahead, then name it in the blob over `etag`; False (and the
    look withdrawn) if another writer got there first.

    A look due before the blob named it (the write outlasted the interval: storage slow or failing, the SDK
    retrying) may have come already and been taken for a leftover, leaving the blob naming a look that is gone,
    "armed" until GRACE_MS past due, so no submit armed the chain again (the simulation's storage seed 889: a
    write of 16 s against a 5 s floor, the queue unlooked-at until the timer's tick). Such a look is followed by
    another, farther ahead by what the write took, named over it, up to LATE_SENDS times."""
    policy = services.backoff.policy
    for _ in range(1 + LATE_SENDS):
        sent_ms = epoch_ms()
        named = await _send_and_name(services, queue, etag, interval_ms)
        if named is None:
            return False
        look_at_ms, etag = named
        now_ms = epoch_ms()
        if now_ms < look_at_ms - early_ms(interval_ms):
            log.info("look chain of %s armed: next look in %.0f s", queue, (look_at_ms - now_ms) / 1000)
            return True
        took_s, ahead_s = (now_ms - sent_ms) / 1000, (look_at_ms - now_ms) / 1000
        log.warning(
            "look chain of %s: its look was named %.1f s after it was sent, %.1f s before it was due: it may have "
            "come first and been ignored; sending another", queue, took_s, ahead_s,
        )  # fmt: skip
        interval_ms = min(policy.ceiling_ms, interval_ms + now_ms - sent_ms)
    return True


def early_ms(interval_ms: int) -> int:
    """How early a look may come by the clocks: Service Bus enqueues it by its own clock, from ours
    (`WAKE_MARGIN_MS`), or half its interval for one too short to leave that much (tests)."""
    return min(WAKE_MARGIN_MS, interval_ms // 2)


async def _send_and_name(
    services: Services, queue: str, etag: str | None, interval_ms: int
) -> tuple[int, str | None] | None:
    """One look sent and named (`schedule`): when it is due and the blob's new ETag; None if another writer got
    there first."""
    policy = services.backoff.policy
    look_at_ms = epoch_ms() + jittered_ms(interval_ms, jitter=policy.jitter, u=random.random())
    token = uuid.uuid4().hex
    event = TriggerEvent(services.settings.account_name, queue, Reason.LOOK, token=token)
    sequence = await services.publisher.publish(event, at=datetime.fromtimestamp(look_at_ms / 1000, timezone.utc))
    armed = Chain(token=token, look_at_ms=look_at_ms, interval_ms=interval_ms)
    container = await services.storage.ensure_container(services.settings.state_container)
    try:
        etag = await write_json(
            container, layout.look_blob(queue), armed.to_json(), etag=etag, create_only=etag is None
        )
    except (PreconditionFailed, ResourceConflict):
        # Another writer first; or storage applied this very write and its answer was lost, the SDK's retry then
        # meeting the new ETag. Withdrawing our own look then left the blob naming a look that never came: the
        # chain dead until the timer's tick (the simulation's storage seed 168). The token is this call's alone.
        stored, etag = await read(services, queue)
        if stored.token != token:
            log.info("look chain of %s armed elsewhere first; this look is withdrawn", queue)
            await withdraw(services, sequence)
            return None
    except StorageError:
        await withdraw(services, sequence)
        raise
    return look_at_ms, etag


async def withdraw(services: Services, sequence: int | None) -> None:
    """Cancel a scheduled look no blob names (best effort: if it arrives, its token does not match)."""
    if sequence is None:
        return
    try:
        await services.publisher.cancel(sequence)
    except TriggerUnavailable as e:
        log.info("could not cancel look %d (it will be ignored when it arrives): %s", sequence, e)


def next_interval_ms(action: str, interval_ms: int, policy: PollPolicy) -> int:
    """After a look that found messages: the floor while a drainer works or was just called; growing toward the
    ceiling while the messages only wait out a retry delay (each has its own retry-due event)."""
    if action == "waiting":
        grown = max(interval_ms, policy.floor_ms)
        return capped_exponential_ms(grown, exponent=policy.exponent, ceiling_ms=policy.ceiling_ms)
    return decreased_ms(interval_ms, floor_ms=policy.floor_ms, decrease=policy.decrease)


async def look(services: Services, event: TriggerEvent) -> str:
    """Serve a `look` event: what it found (`superseded`, `idle`, `work-arrived`, or the fallback's action on
    work). A redelivery of the look that ended the chain (storage failed after the ended write) goes on from
    that write: it reads the depth again and arms the chain if work is there."""
    queue = event.queue
    chain, etag = await read(services, queue)
    if etag is None or event.token not in (chain.token, chain.ended_by):
        log.info("look at %s with a token the chain no longer names; ignored", queue)
        return "superseded"
    if chain.token == event.token:
        deadline = time.monotonic() + services.settings.drain_budget_s
        action, depth = await inspect.inspect(services, queue, deadline)
        if depth:
            interval_ms = next_interval_ms(action, chain.interval_ms, services.backoff.policy)
            try:
                await schedule(services, queue, chain, etag, interval_ms)
            except TriggerUnavailable as e:
                await successor_refused(services, event, chain, etag, e)
            return action
        ended = Chain(interval_ms=chain.interval_ms, ended_by=event.token)
        container = await services.storage.ensure_container(services.settings.state_container)
        try:
            etag = await write_json(container, layout.look_blob(queue), ended.to_json(), etag=etag)
        except PreconditionFailed:
            stored, etag = await read(services, queue)
            if stored.ended_by != event.token:  # not our own write with its answer lost (see `schedule`)
                log.info("look chain of %s re-armed while it looked; that look goes on", queue)
                return "superseded"
        chain = ended
    # Ended before this second read: a submit that enqueued before it is seen here, any later one arms anew.
    if await inspect.depth_of(services, queue):
        try:
            await schedule(services, queue, chain, etag, services.backoff.policy.floor_ms)
        except TriggerUnavailable as e:  # the chain is already unarmed: a redelivery of this look would not count
            log.warning("look chain of %s not armed again (this process tries again): %s", queue, e)
            services.deferred.add(event, rang=True)
        return "work-arrived"
    log.info("look at %s: every lane is empty; the chain ends until work comes", queue)
    return "idle"


async def successor_refused(
    services: Services, event: TriggerEvent, chain: Chain, etag: str | None, error: TriggerUnavailable
) -> None:
    """Service Bus delivered this look but takes no successor. Failing the look would have it delivered 10 times
    and dead-lettered, its chain "armed" until GRACE_MS past due; instead the chain is written unarmed (a submit,
    this process's deferral or the timer arms it at once), this process tries again when Service Bus answers,
    and the timer's back-off is reset so its next tick looks, should this process die first."""
    queue = event.queue
    log.warning("look chain of %s: the next look could not be sent (this process tries again): %s", queue, error)
    unarmed = Chain(interval_ms=chain.interval_ms, ended_by=event.token)
    container = await services.storage.ensure_container(services.settings.state_container)
    try:
        await write_json(container, layout.look_blob(queue), unarmed.to_json(), etag=etag)
    except PreconditionFailed:
        log.info("look chain of %s re-armed elsewhere meanwhile", queue)
        return
    services.deferred.add(event, rang=True)
    try:
        await services.backoff.save(queue, services.backoff.policy.initial(epoch_ms()))
    except StorageError as e:
        log.warning("could not reset the fallback's back-off for %s: %s", queue, e)
