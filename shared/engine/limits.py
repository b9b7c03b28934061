"""Handler limits for the whole app, every drainer on every instance together: at most HANDLER_ITEMS_PER_S items
a second and HANDLER_MAX_IN_FLIGHT chunks in the handler at once.

Nothing is written per chunk (that would cost more than the chunk). Each drainer holds a claim, a part of each
limit, in one allocation blob (`limits/handler.json`, state container) written with its ETag, so two drainers
never claim the same room: the claims of drainers that hold a lease never add up to more than the limits. A
drainer counts again every REFRESH_S while a limit is set (one read of the allocation, then one listing of the
lease blobs; a write when its claim changes, and at its session's first count: an entry of its slot left by an
earlier session is taken over by a write, not as read) and moves its claim toward its fair share: the limit
divided by the drainers leasing now (in-flight split whole, by lease-name order). It lowers it at once (never
below the chunks it has in flight) and raises it only into room nobody else claims, so a drainer that joins
takes its share as the others give theirs up, within a count or two. A drainer whose claim holds no room (no in-flight
place, or a pace that starts nothing within its session) receives nothing (`may_receive`); recruiting stops at
the drainers the limits can feed (`drainers_fed`). With many drainers the counts slow down so that all of them
together make at most COUNTS_PER_S_MAX a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from azure.storage.blob.aio import ContainerClient

from shared.core.errors import PreconditionFailed, ResourceConflict, ResourceMissing, SessionEnding, StorageError
from shared.core.settings import Settings
from shared.store.storage import read_json, translated, write_json

log = logging.getLogger("shared.engine.drainer")

REFRESH_S = 1.0
# Every leasing drainer counts every REFRESH_S, but all of them together at most this often a second (one
# listing and one read of the allocation blob each): at 100 drainers a count every 2 s each, 100 transactions a
# second in all, a fifth of one blob's 500 requests a second.
COUNTS_PER_S_MAX = 50
LEASES_PREFIX = "leases/"
# How long a session's end waits to give its claim back (a read and a write of the allocation): the release is
# best effort, and the session holds its lease until it is done, so storage answering late must not hold them.
RELEASE_TIMEOUT_S = 3.0
ALLOCATION_BLOB = "limits/handler.json"


@dataclass(frozen=True)
class Claim:
    chunks: int = 0
    items_per_s: float = 0.0

    def as_json(self) -> dict[str, float]:
        return {"chunks": self.chunks, "items_per_s": self.items_per_s}


def claim_for(
    own: str,
    leased: list[str],
    claims: Mapping[str, Claim],
    *,
    in_flight: int | None,
    items_per_s: float | None,
    busy: int,
) -> Claim:
    """This drainer's next claim (pure): toward its fair share, lowered at once but never below `busy` chunks,
    raised only into room the other leasing drainers do not claim. A drainer not in `claims` claims nothing."""
    live = sorted({*leased, own})
    others = [claims[name] for name in live if name != own and name in claims]
    mine = claims.get(own, Claim())
    chunks = 0
    if in_flight is not None:
        fair = in_flight_share(in_flight, len(live), live.index(own))
        room = in_flight - sum(c.chunks for c in others)
        chunks = max(min(fair, room), min(busy, mine.chunks), 0)
    rate = 0.0
    if items_per_s is not None:
        fair_rate = rate_share(items_per_s, len(live))
        room_rate = items_per_s - sum(c.items_per_s for c in others)
        rate = max(0.0, min(fair_rate, room_rate))
    return Claim(chunks, round(rate, 6))


def in_flight_share(limit: int, drainers: int, rank: int) -> int:
    """Drainer `rank` (0-based) of `drainers`: its whole part of `limit` chunks (the parts sum to `limit`)."""
    drainers = max(1, drainers)
    return limit // drainers + (1 if rank < limit % drainers else 0)


def rate_share(limit: float, drainers: int) -> float:
    return limit / max(1, drainers)


def drainers_fed(*, items_per_s: float | None, in_flight: int | None, chunk_items: int, horizon_s: float) -> int | None:
    """How many drainers the limits can keep busy (None: no limit): one per in-flight place, and one per chunk
    the rate starts within `horizon_s` (half a visibility timeout); at least one."""
    fed: list[int] = []
    if in_flight is not None:
        fed.append(in_flight)
    if items_per_s is not None:
        fed.append(math.floor(items_per_s * horizon_s / max(1, chunk_items)))
    return max(1, min(fed)) if fed else None


def refresh_s(drainers: int) -> float:
    """How often each drainer counts, so that all of them together count at most COUNTS_PER_S_MAX a second."""
    return max(REFRESH_S, drainers / COUNTS_PER_S_MAX)


class Pacer:
    """Starts of work spaced so that items go at most `rate` a second: a chunk of k items starting at t lets
    the next start at t + k / rate (the first starts at once)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._next = -math.inf

    def reserve(self, items: int, rate: float) -> float:
        """Reserve a start for `items`; answers how long to wait for it."""
        now = self.clock()
        start = max(now, self._next)
        self._next = start + items / rate
        return start - now

    def free_in(self, now: float) -> float:
        """How long until the next start is free."""
        return max(0.0, self._next - now)

    def ahead(self, rate: float, horizon_s: float, items_per_chunk: int) -> int:
        """How many chunks of `items_per_chunk` this pace starts within `horizon_s` from now."""
        free_in = max(0.0, self._next - self.clock())
        return max(1, math.floor((horizon_s - free_in) * rate / max(1, items_per_chunk)))


class HandlerLimits:
    """One drainer's claim on the app-wide limits (None: that limit is not set)."""

    def __init__(
        self,
        state: ContainerClient,
        own_lease: str,
        *,
        items_per_s: float | None,
        in_flight: int | None,
        clock: Callable[[], float] = time.monotonic,
        horizon_s: float = 15.0,
    ) -> None:
        """`horizon_s`: a start further off than this at this claim's pace is no room (half a visibility)."""
        self.state, self.own_lease, self.clock, self.horizon_s = state, own_lease, clock, horizon_s
        self.items_per_s, self.in_flight_limit = items_per_s, in_flight
        self.claim = Claim()  # nothing until the allocation says so
        self._counted_at = -math.inf
        self._counting = False  # a count is under way
        self._written = False  # this session has written its claim (an entry it only read may be a stale one's)
        self._pacer = Pacer(clock)
        self._busy = 0
        self._drainers = 1  # leasing at the last count
        self._fair_chunks: int | None = None  # this drainer's fair part of HANDLER_MAX_IN_FLIGHT at the last count
        self._changed = asyncio.Condition()
        self._notifying: set[asyncio.Future[None]] = set()  # a place freed by a thread, told to the chunks waiting

    @classmethod
    def for_session(
        cls, state: ContainerClient, own_lease: str, settings: Settings, clock: Callable[[], float]
    ) -> HandlerLimits:
        """The limits the settings ask for (0: not set), claimed under the session's lease blob."""
        return cls(
            state,
            own_lease,
            items_per_s=settings.handler_items_per_s or None,
            in_flight=settings.handler_max_in_flight or None,
            clock=clock,
            horizon_s=settings.visibility_timeout_s / 2,
        )

    @property
    def active(self) -> bool:
        return self.items_per_s is not None or self.in_flight_limit is not None

    @property
    def rate(self) -> float | None:
        return None if self.items_per_s is None else self.claim.items_per_s

    @property
    def capacity(self) -> int | None:
        return None if self.in_flight_limit is None else self.claim.chunks

    async def count(self) -> None:
        """Count the drainers leasing now and move this one's claim (one listing, one read, a write if it
        changes; best effort: on a storage error or a concurrent write the claim stands until the next count, only
        lowered if this count lowered it). Nothing if this drainer's count is under way already."""
        if self._counting:
            # One count at a time: a count whose read storage answers late would otherwise end after a later one
            # that lowered this claim and wrote it, and take the claim back up from its old read without a write
            # (the simulation's limits seed 119: two handler calls in flight under a limit of 1). The chunks
            # waiting for a share hear the count under way end.
            return
        self._counting = True
        self._counted_at = self.clock()
        try:
            await self._count()
        except (StorageError, PreconditionFailed, ResourceConflict) as e:
            log.info("handler limits: claim not moved this time (%s)", e)
        finally:
            self._counting = False
        async with self._changed:
            self._changed.notify_all()

    async def _count(self) -> None:
        # The allocation read before the leases are listed: a lease the listing misses was taken after the read,
        # and its holder's claim stands only once written (below), which moves the ETag this count writes with. A
        # listing older than a read answered late would drop the claim of a drainer that leased in between and
        # took its slot's entry as it stood (the simulation's limits seeds 712 and 983: 3 calls under a limit of 2).
        try:
            doc, etag = await read_json(self.state, ALLOCATION_BLOB)
        except ResourceMissing:
            doc, etag = {}, None
        async with translated("list drain leases"):
            leased = [
                b.name async for b in self.state.list_blobs(name_starts_with=LEASES_PREFIX) if b.lease.state == "leased"
            ]
        entries = doc.get("drainers", {}) if isinstance(doc, dict) else {}
        claims = {name: Claim(int(e.get("chunks", 0)), float(e.get("items_per_s", 0.0))) for name, e in entries.items()}
        live = {*leased, self.own_lease}
        self._drainers = len(live)
        if self.in_flight_limit is not None:
            self._fair_chunks = in_flight_share(self.in_flight_limit, len(live), sorted(live).index(self.own_lease))
        claims = {name: c for name, c in claims.items() if name in live}  # a released lease claims nothing
        wanted = claim_for(
            self.own_lease,
            leased,
            claims,
            in_flight=self.in_flight_limit,
            items_per_s=self.items_per_s,
            busy=self._busy,
        )
        # The slot's entry left by an earlier session (its release gave up) is taken over by a write, not as read.
        if self._written and wanted == claims.get(self.own_lease) and len(claims) == len(entries):
            self.claim = wanted
            return
        claims[self.own_lease] = wanted
        # Lowered here at once, raised only once written: a chunk admitted during the write against the old claim
        # would run in room the write gives another drainer (the simulator found two calls under a limit of 1).
        before = self.claim
        self.claim = Claim(min(before.chunks, wanted.chunks), min(before.items_per_s, wanted.items_per_s))
        body = {"drainers": {name: c.as_json() for name, c in sorted(claims.items())}}
        await write_json(self.state, ALLOCATION_BLOB, body, etag=etag, create_only=etag is None)
        self._written = True
        if wanted != before:
            log.info(
                "handler limits: %d drainer(s) leasing; this one may start %s items/s and hold %s chunk(s)",
                len(live), _shown(self.rate if self.items_per_s is None else wanted.items_per_s),
                _shown(None if self.in_flight_limit is None else wanted.chunks),
            )  # fmt: skip
        self.claim = wanted

    async def release(self) -> None:
        """Give the claim back as the session ends (best effort: a released lease's claim is ignored anyway), for
        at most RELEASE_TIMEOUT_S: the session ends within its budget plus its calls' settling (docs/settings.md,
        DRAIN_BUDGET_S), not after storage's late answers (the simulation's `limits` seed 2: 30 s)."""
        if not self.active:
            return
        with contextlib.suppress(StorageError, PreconditionFailed, ResourceMissing, TimeoutError):
            async with asyncio.timeout(RELEASE_TIMEOUT_S):
                await self._release()

    async def _release(self) -> None:
        doc, etag = await read_json(self.state, ALLOCATION_BLOB)
        entries = dict(doc.get("drainers", {}))
        if entries.pop(self.own_lease, None) is not None:
            await write_json(self.state, ALLOCATION_BLOB, {"drainers": entries}, etag=etag)

    async def _recount_if_due(self) -> None:
        if self.clock() - self._counted_at >= refresh_s(self._drainers):
            await self.count()

    def hold_until(self, thread: asyncio.Future[Any]) -> None:
        """Keep an in-flight place taken until `thread` is done: the place of a chunk given up (its task cancelled,
        `admit` giving its place back) while its sync call's thread runs on (`shared.engine.handler_calls`). The
        place counts in `_busy`, so no chunk is admitted into it and no count lowers the claim below it."""
        self._busy += 1
        thread.add_done_callback(self._freed)

    def _freed(self, _: asyncio.Future[Any]) -> None:
        self._busy -= 1
        notifying = asyncio.ensure_future(self._notify())  # the chunks waiting for a place hear it come free
        self._notifying.add(notifying)
        notifying.add_done_callback(self._notifying.discard)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def may_receive(self, now: float) -> bool:
        """Whether this claim has room for a chunk: an in-flight place (if that limit is set), and a start
        within `horizon_s` at its pace (if the rate is). A drainer with none receives nothing."""
        if self.capacity is not None and self.capacity <= 0:
            return False
        rate = self.rate
        return rate is None or (rate > 0 and self._pacer.free_in(now) < self.horizon_s)

    def starved(self) -> bool:
        """Whether even this drainer's fair part of the limits is nothing: more drainers lease than
        HANDLER_MAX_IN_FLIGHT has places, and this one ranks past them. A drainer whose fair part is some but
        whose room the others still claim is not starved: they yield it at their next count."""
        return self._fair_chunks == 0

    async def wait_for_share(self, deadline: float) -> None:
        """Until the claim changes (counted again when due) or `deadline`."""
        await self._recount_if_due()
        if self.may_receive(self.clock()):
            return
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                wait = min(refresh_s(self._drainers), max(0.0, deadline - self.clock()))
                await asyncio.wait_for(self._changed.wait(), wait)

    def page_size(self, most: int, visibility_s: float, items_per_chunk: int) -> int:
        """How many messages to receive: no more than this drainer's pace starts within half a visibility
        timeout, so none waits long enough to need its visibility extended."""
        rate = self.rate
        if rate is None:
            return most
        if rate <= 0:
            return 1
        return max(1, min(most, self._pacer.ahead(rate, visibility_s / 2, items_per_chunk)))

    @asynccontextmanager
    async def admit(self, items: int, ending: Callable[[], bool] | None = None) -> AsyncIterator[None]:
        """Hold one of this drainer's in-flight places and a start within its pace for a chunk of `items`. Raises
        SessionEnding instead of waiting once `ending()` says the session starts no more calls: a chunk received
        before its drainer's claim went to a drainer ranking first would otherwise wait for that drainer's
        sessions to end, one after another, past its own session's budget (`limits` seed 15 of the simulation)."""
        if not self.active:
            yield
            return
        while True:
            await self._recount_if_due()
            async with self._changed:
                capacity, rate = self.capacity, self.rate
                if (capacity is None or self._busy < capacity) and (rate is None or rate > 0):
                    self._busy += 1
                    break
                if ending is not None and ending():
                    raise SessionEnding("the drain session ends while its chunk waits for a share of the limits")
                # Until a place comes free or the claim changes (counted again every REFRESH_S).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), refresh_s(self._drainers))
        try:
            rate = self.rate
            if rate is not None:
                await asyncio.sleep(self._pacer.reserve(items, rate))
            yield
        finally:
            async with self._changed:
                self._busy -= 1
                self._changed.notify_all()


def _shown(value: float | int | None) -> str:
    return "unlimited" if value is None else f"{value:g}"
