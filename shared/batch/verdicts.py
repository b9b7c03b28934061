"""The drainers' memory of which attempt of a batch was committed: bounded in size and in age (pure).

A long-lived host meets one batch after another; an unbounded map grows by one entry per batch for ever.
And a verdict must not outlive the manifest it came from: a lifecycle rule may delete the manifest, after
which the batch's chunks (if any still came) must be judged again. So an entry is forgotten after
`max_age_s`, and the oldest go first when there are more than `max_entries`.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

MAX_ENTRIES = 10_000
MAX_AGE_S = 3_600.0  # far shorter than any lifecycle rule (days), far longer than a drain session


class CommittedAttempts:
    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_age_s: float = MAX_AGE_S) -> None:
        self.max_entries, self.max_age_s = max_entries, max_age_s
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()
        # batch id -> when (epoch ms) it was accepted, as the mark or doorbell that named it said: taken once, by
        # the drainer that handles its first chunk (the wake latency metric); only for batches in `_entries`
        self._accepted: dict[str, int] = {}
        # batch ids whose entry a doorbell gave (Service Bus, not storage): it admits a chunk of that attempt, and
        # never condemns one of another (that chunk's manifest is read): a wrong doorbell costs a read, not data
        self._hints: set[str] = set()

    def get(self, batch_id: str, *, now: float) -> str | None:
        entry = self._entries.get(batch_id)
        if entry is None:
            return None
        attempt, stored = entry
        if now - stored > self.max_age_s:
            self._forget(batch_id)
            return None
        return attempt

    def judge(self, batch_id: str, attempt: str, *, now: float) -> bool | None:
        """Whether `attempt` is the batch's committed one: True, False (a stale attempt), or None (not known here,
        or only a doorbell's word that names another attempt: read the manifest)."""
        committed = self.get(batch_id, now=now)
        if committed is None:
            return None
        if committed == attempt:
            return True
        return None if batch_id in self._hints else False

    def put(
        self, batch_id: str, attempt: str, *, now: float, accepted_ms: int | None = None, hint: bool = False
    ) -> None:
        """Remember the batch's committed attempt, read from storage (its manifest, its lane's mark) or, with
        `hint`, said by a doorbell: a hint never replaces what is remembered."""
        if hint and self.get(batch_id, now=now) is not None:
            return
        self._forget(batch_id)
        self._entries[batch_id] = (attempt, now)
        if accepted_ms is not None:
            self._accepted[batch_id] = accepted_ms
        if hint:
            self._hints.add(batch_id)
        while len(self._entries) > self.max_entries:
            self._forget(next(iter(self._entries)))

    def _forget(self, batch_id: str) -> None:
        self._entries.pop(batch_id, None)
        self._accepted.pop(batch_id, None)
        self._hints.discard(batch_id)

    def take_accepted(self, batch_id: str) -> int | None:
        """When the batch was accepted, once: None after the first call, or if no mark or doorbell said."""
        return self._accepted.pop(batch_id, None)

    def __len__(self) -> int:
        return len(self._entries)


class EndedBatches:
    """The batches a drainer process knows to be ended (cancelled, or failed past their tolerance), from the
    listings of the ended markers (`shared.store.ended`), the last begun at most `fresh_s` ago before a handler
    call of a batch starts (`shared.batch.lifecycle.ENDED_CHECK_S`). The first listing reads every marker, the
    later ones only those written since the previous one began (`since`), whose ids join what is known."""

    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self._ids: frozenset[str] = frozenset()
        self._mine: set[str] = set()  # ended by this process since: known before any listing says so
        self.listed_at: float | None = None  # the last listing's start, by the monotonic clock
        self.since: datetime | None = None  # the same, by the wall clock: where the next listing may start from

    def fresh(self, now: float) -> bool:
        return self.listed_at is not None and now - self.listed_at <= self.fresh_s

    def listed(
        self, ids: frozenset[str], started_at: float, *, began: datetime | None = None, full: bool = True
    ) -> None:
        """A listing begun at `started_at` (`began` by the wall clock): it saw every marker written before then,
        all of them if `full`, else those written since the previous listing began. One that began before the
        listing known here (two sessions of a process list concurrently) only adds its ids."""
        if self.listed_at is not None and started_at < self.listed_at:
            self._ids |= ids
            return
        self._ids = ids if full else self._ids | ids
        self.listed_at, self.since = started_at, began
        self._mine -= ids

    def add(self, batch_id: str) -> None:
        self._mine.add(batch_id)

    def __contains__(self, batch_id: object) -> bool:
        return batch_id in self._ids or batch_id in self._mine


class DrainedBatches:
    """The (partition, batch id, attempt) of the batches whose lane's mark a drainer's closing look listed
    before it found nothing visible in the partition: their chunks had been stored before that listing, so
    whatever of them is not done is held by a drainer, or hidden with its own wake-up (a retry, a put-back).
    A doorbell of one of them finds nothing to do (`shared.engine.serve`). Bounded: the oldest go first."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def saw(self, partition: str, committed: list[tuple[str, str]]) -> None:
        for batch_id, attempt in committed:
            key = (partition, batch_id, attempt)
            self._seen.pop(key, None)
            self._seen[key] = None
        while len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._seen

    def __len__(self) -> int:
        return len(self._seen)
