"""The fallback poller's back-off state per queue: in memory, persisted to a blob only when it changes.

Only the interval (and idle count) is persisted, with ETag concurrency; the next due time lives in
memory. At the ceiling nothing changes, so an idle queue costs one depth read per ceiling and no
writes. After a restart, a queue is due at once, and continues from the persisted interval.

The time of the partition's last thorough look (every lane's depth read: `shared.watch.inspect`) is kept in the
same blob, so the timer makes one a day (`THOROUGH_EVERY_MS`) however often its instance is recycled: one more
write a day per partition, none per lane.
"""

from __future__ import annotations

import logging
from typing import Any

from shared.core import layout
from shared.core.backoff import PollPolicy, PollState
from shared.core.errors import PreconditionFailed, ResourceConflict, ResourceMissing
from shared.core.settings import Settings
from shared.store.storage import Storage, read_json, write_json

log = logging.getLogger(__name__)

# The timer reads every lane's depth at most this often (the 6-hourly tick's every fourth; an hour's slack so a
# tick a little early still counts).
THOROUGH_EVERY_MS = 23 * 3600 * 1000


def policy_of(settings: Settings) -> PollPolicy:
    return PollPolicy(
        floor_ms=settings.backoff_floor_ms,
        ceiling_ms=settings.backoff_ceiling_ms,
        exponent=settings.backoff_exponent,
        jitter=settings.backoff_jitter,
        decrease=settings.backoff_decrease,
    )


class BackoffStore:
    def __init__(self, storage: Storage, settings: Settings) -> None:
        self._storage = storage
        self._settings = settings
        self.policy = policy_of(settings)
        self._states: dict[str, PollState] = {}
        self._etags: dict[str, str | None] = {}
        self._thorough: dict[str, int] = {}  # when each partition's last thorough look was (epoch ms)

    def known(self) -> dict[str, PollState]:
        return dict(self._states)

    async def load(self, queue: str, now_ms: int) -> PollState:
        state = self._states.get(queue)
        if state is None:
            state = await self._read(queue, now_ms)
            self._states[queue] = state
        return state

    async def _read(self, queue: str, now_ms: int) -> PollState:
        container = await self._storage.ensure_container(self._settings.state_container)
        try:
            doc, etag = await read_json(container, layout.backoff_blob(queue))
        except ResourceMissing:
            self._etags[queue] = None
            return self.policy.initial(now_ms)
        self._etags[queue] = etag
        if isinstance(doc, dict) and isinstance(doc.get("thorough_ms"), int):
            self._thorough[queue] = doc["thorough_ms"]
        return from_json(doc, now_ms, self.policy)

    def thorough_due(self, queue: str, now_ms: int) -> bool:
        """Whether the timer's look at `queue` (loaded first) should read every lane: a day since the last did."""
        return now_ms - self._thorough.get(queue, 0) >= THOROUGH_EVERY_MS

    async def save(self, queue: str, state: PollState, *, thorough_ms: int | None = None) -> None:
        """`thorough_ms`: the look just made read every lane, at that time (written with the state)."""
        before = self._states.get(queue)
        self._states[queue] = state
        if thorough_ms is not None:
            self._thorough[queue] = thorough_ms
        unchanged = before is not None and before.interval_ms == state.interval_ms and queue in self._etags
        if unchanged and thorough_ms is None:
            return
        container = await self._storage.ensure_container(self._settings.state_container)
        etag = self._etags.get(queue)
        doc: dict[str, int] = {"interval_ms": state.interval_ms, "idle_count": state.idle_count}
        if queue in self._thorough:
            doc["thorough_ms"] = self._thorough[queue]
        try:
            self._etags[queue] = await write_json(
                container, layout.backoff_blob(queue), doc, etag=etag, create_only=etag is None
            )
        except (PreconditionFailed, ResourceConflict):
            # Another instance wrote first (the timer is a singleton, so rarely): adopt its state.
            log.info("back-off state of %s changed elsewhere; reloading it", queue)
            self._states[queue] = await self._read(queue, state.next_due_ms)


def from_json(doc: Any, now_ms: int, policy: PollPolicy) -> PollState:
    try:
        interval = int(doc["interval_ms"])
        idle = int(doc.get("idle_count", 0))
    except (KeyError, TypeError, ValueError):
        log.warning("back-off state blob is malformed (%r); starting from the floor", doc)
        return policy.initial(now_ms)
    interval = min(max(interval, policy.floor_ms), policy.ceiling_ms)
    return PollState(interval_ms=interval, next_due_ms=now_ms, idle_count=idle)


def to_view(state: PollState, now_ms: int) -> dict[str, int]:
    return {
        "interval_ms": state.interval_ms,
        "idle_count": state.idle_count,
        "next_due_in_ms": max(0, state.next_due_ms - now_ms),
    }
