"""Defects that leave work unlooked at, caught by the look bound (`sim.checks.invariants.Looks`): every partition
holding messages is looked at within the look chain's ceiling plus what may delay a look, and within that bound
after a 202."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared.batch.batches import Manifest, State
from shared.bus.deferrals import DeferredTriggers
from shared.core.errors import StorageError, TriggerUnavailable
from shared.engine import settling
from shared.engine.drainer import Drainer
from shared.engine.held import HeldMessages
from shared.engine.visibility import keeping_invisible
from shared.engine.wakeups import Wakeups
from shared.intake import submit
from shared.store.received import epoch_ms
from shared.watch import fallback, lookout
from sim.mutants.base import Mutant, scoped, swap

log = logging.getLogger(__name__)

LOOKED = "was not looked at"
SETTLED = "s after the last fault (bound"  # liveness (`sim.checks.promises`)


@contextmanager
def _no_look_chain() -> Iterator[None]:
    """Issue 13 reverted (a0942b3): no look chain; a queue whose drainers' own wake-ups are gone waits for the
    fallback timer (every 6 hours as shipped, every 10 minutes here)."""

    async def arm(services: Any, queue: str, at: datetime | None = None) -> bool:
        return False

    yield from swap(lookout, "arm", arm)


@contextmanager
def _watchdog_before_hidden_messages() -> Iterator[None]:
    """Issue 18 item 2 (8ac5131): the drainer does not track when the messages it hid reappear, so its watchdog
    may come before them and find nothing, should it die."""
    yield from swap(Wakeups, "note_visible", lambda self, at_ms: None)


@contextmanager
def _left_for_redelivery_without_wakeup() -> Iterator[None]:
    """Issue 18 item 3 (8ac5131): a message left for redelivery by a failed extension or result write gets no
    retry-due wake-up for when it reappears."""

    async def handle(self: Drainer, item: Any, placed: Any = None) -> None:
        try:
            await keeping_invisible(item, self._process(item, placed), visibility_s=self.settings.visibility_timeout_s,
                                    clock=self.clock, extended=self.wakeups.note_visible)  # fmt: skip
        except asyncio.CancelledError:
            raise
        except StorageError as e:  # left for redelivery, and nothing scheduled for when it reappears
            log.warning("chunk message %s left for redelivery: %s", item.message.id, e)
        except Exception:
            log.exception("chunk message %s failed unexpectedly", item.message.id)
        finally:
            self.lanes.handled += 1
            self._held -= 1

    yield from swap(HeldMessages, "_handle", handle)


@contextmanager
def _keyed_retry_rings_nothing() -> Iterator[None]:
    """Item 11: a keyed retry of a batch already accepted answers it without ringing its doorbell or arming a
    look, so a batch whose first submit died between its commit and its doorbell waits for the timer."""
    ring = submit.ring

    async def quiet_ring(services: Any, manifest: Manifest, payload_size: int, at: datetime | None = None, *,
                         committed: bool = False) -> str:  # fmt: skip
        if manifest.state is State.ACCEPTED:  # the replayed answer's manifest, read back as stored
            return manifest.trigger or "published"
        return await ring(services, manifest, payload_size, at, committed=committed)

    yield from swap(submit, "ring", quiet_ring)


@contextmanager
def _successor_refused_fails_the_look() -> Iterator[None]:
    """Item 16: a look whose successor Service Bus refuses fails (and is delivered again, up to 10 times), its
    chain left naming a look that will not come until GRACE_MS past due."""

    async def refused(services: Any, event: Any, chain: Any, etag: Any, error: Exception) -> None:
        raise error

    yield from swap(lookout, "successor_refused", refused)


@contextmanager
def _ended_look_redelivered_is_superseded() -> Iterator[None]:
    """Item 16: a look that wrote the chain ended and then failed (a storage error on its second depth read) is
    taken as a leftover when it is delivered again: work enqueued meanwhile has no look."""
    from_json = lookout.Chain.from_json

    def forgetful(doc: Any) -> lookout.Chain:
        return replace(from_json(doc), ended_by=None)

    yield from swap(lookout.Chain, "from_json", staticmethod(forgetful))


@contextmanager
def _far_look_kept() -> Iterator[None]:
    """Item 16: a submit to a queue whose look is armed far ahead (its interval grew while messages waited out a
    retry) leaves it there, instead of bringing it back to the floor."""
    arm = lookout.arm

    async def keep(services: Any, queue: str, at: datetime | None = None) -> bool:
        chain, _ = await lookout.read(services, queue)
        if chain.armed(epoch_ms()):
            return False
        return await arm(services, queue, at)

    yield from swap(lookout, "arm", keep)


@contextmanager
def _tick_ends_at_a_failed_partition() -> Iterator[None]:
    """Item 6: one partition's storage failure ends the timer's tick: the partitions after it are not looked at."""

    async def poll_one(services: Any, queue: str, deadline: float, clock_ms: Any) -> Any:
        return await fallback.poll_queue(services, queue, deadline, clock_ms)

    yield from swap(fallback, "poll_one", poll_one)


@contextmanager
def _arm_storage_failure_left_to_timer() -> Iterator[None]:
    """Issue 37 (storage seed 110): a look chain storage would not let a submit or replay arm is left to the timer,
    and a deferral whose arm storage refuses is dropped, though the doorbell may be lost after it was sent."""

    async def watch(services: Any, rang: Any, at: datetime | None = None) -> None:
        try:
            await lookout.arm(services, rang.queue, at)
        except TriggerUnavailable:
            services.deferred.add(rang, rang=True, at=at)
        except StorageError as e:
            log.warning("look chain of %s not armed (the fallback timer covers): %s", rang.queue, e)

    async def try_once(self: DeferredTriggers, queue: str, pending: Any) -> None:
        if pending.event is not None:
            await self._publisher().publish(pending.event, at=pending.at)
            pending.event = None
        if not pending.armed:
            try:
                await self._arm(queue, pending.at)
            except StorageError as e:
                log.warning("could not arm the look chain of %s: %s", queue, e)
            pending.armed = True

    with scoped(lookout, "watch", watch):
        yield from swap(DeferredTriggers, "_try", try_once)


@contextmanager
def _look_named_late_kept() -> Iterator[None]:
    """Issue 37 (storage seed 889): a look the chain could name only once it was due (its write slow) is kept,
    though it may have come first and been ignored as a leftover: the blob names a look that came and went."""

    async def schedule(services: Any, queue: str, chain: Any, etag: str | None, interval_ms: int) -> bool:
        return await send_and_name(services, queue, etag, interval_ms) is not None

    send_and_name = vars(lookout)["_send_and_name"]
    yield from swap(lookout, "schedule", schedule)


@contextmanager
def _retry_delay_in_seconds() -> Iterator[None]:
    """A retried item's delay taken in seconds where it is milliseconds: the message is hidden for minutes, looked
    at all along (the look bound holds), handled long after the faults are over."""
    delay_ms = vars(settling)["retry_delay_ms"]

    def seconds(attempt: int, **kwargs: Any) -> int:
        return int(delay_ms(attempt, **kwargs)) * 1000

    yield from swap(settling, "retry_delay_ms", seconds)


MUTANTS = [
    Mutant("no-look-chain", "a0942b3 (issue 13)", "no look chain: the timer is the only net", _no_look_chain,
           family="storage", expect=LOOKED,
           invariant='the look bound (`Looks`)'),
    Mutant("watchdog-before-hidden-messages", "8ac5131 (issue 18 item 2)", "a drainer's watchdog may come before "
           "the messages it hid reappear", _watchdog_before_hidden_messages,
           why="the look chain (issue 13) looks at a queue holding messages at least every `BACKOFF_CEILING_MS`: a lost"
               " watchdog costs latency within the look bound"),
    Mutant("left-for-redelivery-without-wakeup", "8ac5131 (issue 18 item 3)", "a message left for redelivery by a "
           "failed write gets no retry-due wake-up", _left_for_redelivery_without_wakeup, family="storage",
           why='as above: the look chain covers a lost retry-due wake-up within the look bound'),
    Mutant("tick-ends-at-failed-partition", "daedeca (issue 26 item 6)", "one partition's storage failure ends "
           "the timer's tick", _tick_ends_at_a_failed_partition, family="storage",
           why='no tick meets a storage failure: the timer ticks every 10 minutes here and faults end by about 105 s'),
    Mutant("keyed-retry-rings-nothing", "e65182f (issue 26 item 11)", "a keyed retry of an accepted batch rings "
           "no doorbell and arms no look", _keyed_retry_rings_nothing, family="submit", expect=LOOKED,
           invariant='a look after every 202 (`Looks`)'),
    Mutant("successor-refused-fails-look", "a25c39d (issue 26 item 16)", "a look whose successor Service Bus "
           "refuses fails, its chain left armed", _successor_refused_fails_the_look, expect=LOOKED,
           invariant='the look bound (`Looks`)',
           why="a look whose successor is refused must be its queue's only net: in the `platform` family, whose "
               "Service Bus refuses sends while it goes on delivering, the doorbells refused meanwhile are deferred "
               "and rung once it answers, and the drainers' own wake-ups carry the rest (none of 60 `platform` seeds "
               "caught it either). Plan: refused sends in the `storage` seeds whose doorbells are lost"),
    Mutant("ended-look-redelivered-ignored", "a25c39d (issue 26 item 16)", "a look redelivered after it ended "
           "the chain is ignored", _ended_look_redelivered_is_superseded, family="storage", expect=LOOKED,
           invariant='the look bound (`Looks`)',
           why="the submit that meets the ended look rings its own doorbell: the chain is the net only when that "
               "doorbell is lost, and a third of the `storage` seeds now lose every doorbell; but the look must also "
               "end the chain and then fail its second depth read (one round trip) to be delivered again: none of "
               "300 `storage` seeds did. Plan: storage faults aimed at a look's depth read in those seeds"),
    Mutant("far-look-kept", "a25c39d (issue 26 item 16)", "a submit leaves a look armed far ahead where it is",
           _far_look_kept, expect=LOOKED,
           invariant='the look bound (`Looks`)',
           why="as above, and the world's `BACKOFF_CEILING_MS` is 60 s, not 30 minutes, except in the `idle` family, "
               "whose items never retry, so no look there is armed far ahead"),
    Mutant("arm-storage-failure-left-to-timer", "114829a (issue 37)", "a look chain storage would not let a "
           "submit arm is left to the timer", _arm_storage_failure_left_to_timer, family="storage", expect=LOOKED,
           invariant='a look after every 202 (`Looks`)'),
    Mutant("look-named-late-kept", "175ab5c (issue 37)", "a look the chain named only once it was due is kept "
           "(it may have come first and been ignored)", _look_named_late_kept, family="storage", expect=LOOKED,
           invariant='a look after every 202 (`Looks`)', seeds=900),
    Mutant("retry-delay-in-seconds", "none (made here)", "a retried item's delay taken in seconds, not "
           "milliseconds", _retry_delay_in_seconds, expect=SETTLED,
           invariant='liveness from the last fault (`sim.checks.promises`)'),
]  # fmt: skip
