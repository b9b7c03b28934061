"""What to do with a processed chunk: which items are done, retried alone, or poisoned (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any

from shared.handlers import ItemOutcome

MAX_ID_CHARS = 200  # an item's "id" longer than this is not kept in its result record
# How a chunk parked unrun after its last attempt without an outcome says so (`unanswered`).
NO_OUTCOME = "no outcome"

_first, _second = itemgetter(0), itemgetter(1)
_ok, _value = attrgetter("ok"), attrgetter("value")


@dataclass(frozen=True)
class Failure:
    position: int
    reason: str


@dataclass(frozen=True)
class ResultRecord:
    """The outcome of one delivery of a chunk message (its lineage: chunk, gen, first), stored by
    `shared.batch.results`."""

    batch_id: str
    chunk: int
    gen: int
    attempt: int
    ok: list[tuple[int, Any]]
    failed: list[Failure]  # gone to the poison queue
    retrying: list[int]  # carried on by generation gen + 1
    summary: Mapping[str, Any] = field(default_factory=dict)
    cancelled: list[int] = field(default_factory=list)  # discarded unrun: its batch was ended
    expired: list[int] = field(default_factory=list)  # discarded unrun: its batch's expires_at had passed
    ids: list[tuple[int, str | int]] = field(default_factory=list)  # (position, the item's own "id") where it has one
    lineage_first: int | None = None  # its message's first position, where the record holds only some of them

    @property
    def first(self) -> int:
        """The lineage key of this record: the first position its message carried."""
        if self.lineage_first is not None:
            return self.lineage_first
        positions = [p for p, _ in self.ok] + [f.position for f in self.failed] + self.retrying
        return min(positions + self.cancelled + self.expired, default=0)

    def to_json(self, finished_at: str) -> dict[str, Any]:
        values = list(map(_second, self.ok))
        return {
            "batch_id": self.batch_id,
            "chunk": self.chunk,
            "gen": self.gen,
            "first": self.first,
            "attempt": self.attempt,
            "finished_at": finished_at,
            "ok": list(map(_first, self.ok)),
            **({"values": values} if values.count(None) != len(values) else {}),
            "failed": [{"i": f.position, "reason": f.reason} for f in self.failed],
            "retrying": self.retrying,
            "summary": dict(self.summary),
            **({"cancelled": self.cancelled} if self.cancelled else {}),
            **({"expired": self.expired} if self.expired else {}),
            **({"ids": self.ids} if self.ids else {}),  # each pair a JSON array, as a list would be
        }

    @property
    def holds_values(self) -> bool:
        """Whether its document holds values the handler gave (an item's value, the summary), which may be any
        JSON the standard library writes (NaN too); the rest is integers and strings."""
        values = list(map(_second, self.ok))
        return bool(self.summary) or values.count(None) != len(values)


@dataclass(frozen=True)
class Settlement:
    record: ResultRecord
    retry: list[int]  # positions to re-enqueue now, in a message of generation gen + 1
    poison: list[Failure]  # items to send to the poison queue now

    @property
    def complete(self) -> bool:
        return not self.retry


def settle(
    *,
    batch_id: str,
    chunk: int,
    gen: int,
    positions: Sequence[int],
    outcomes: Sequence[ItemOutcome],
    attempt: int,
    max_attempts: int,
    summary: Mapping[str, Any] | None = None,
    items: Sequence[Any] | None = None,
) -> Settlement:
    """Successes are recorded; a retryable failure is retried until `max_attempts`, then poisoned;
    a permanent failure is poisoned at once. Only failed items travel on."""
    if len(positions) != len(outcomes):
        raise ValueError("one outcome per position")
    ids = item_ids(positions, items)
    if all(map(_ok, outcomes)):  # the common chunk: every item succeeded (no Python branch per item)
        done = list(zip(positions, map(_value, outcomes), strict=True))
        return Settlement(ResultRecord(batch_id, chunk, gen, attempt, done, [], [], summary or {}, ids=ids), [], [])
    ok: list[tuple[int, Any]] = []
    retry: list[int] = []
    poison: list[Failure] = []
    for position, outcome in zip(positions, outcomes, strict=True):
        if outcome.ok:
            ok.append((position, outcome.value))
        elif outcome.retryable and attempt < max_attempts:
            retry.append(position)
        else:
            why = outcome.reason or "failed"
            if outcome.retryable:
                why = f"failed {attempt} times (MAX_DEQUEUE_COUNT {max_attempts}); last: {why}"
            poison.append(Failure(position, why))
    record = ResultRecord(batch_id, chunk, gen, attempt, ok, poison, retry, summary or {}, ids=ids)
    return Settlement(record, retry, poison)


def item_ids(positions: Sequence[int], items: Sequence[Any] | None) -> list[tuple[int, str | int]]:
    """(position, id) of each item that is an object with a string or integer "id" (the results export names it)."""
    if items is None:
        return []
    if len(positions) == len(items) and set(map(type, items)) == {dict}:  # the common chunk, at C speed
        values: list[Any] = list(map(dict.get, items, repeat("id")))
        if set(map(type, values)) == {str} and max(map(len, values)) <= MAX_ID_CHARS:
            return list(zip(positions, values, strict=True))
    found: list[tuple[int, str | int]] = []
    append = found.append
    for position, item in zip(positions, items, strict=True):
        if type(item) is dict or isinstance(item, dict):
            value: Any = item.get("id")
            kind = type(value)
            if kind is str:  # the common case first: decoded JSON holds exact types
                if len(value) <= MAX_ID_CHARS:
                    append((position, value))
            elif (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, str) and len(value) <= MAX_ID_CHARS
            ):
                append((position, value))
    return found


def discarded(
    header_batch: str,
    chunk: int,
    gen: int,
    attempt: int,
    positions: Sequence[int],
    items: Sequence[Any],
    *,
    why: str,
    first: int | None = None,
) -> ResultRecord:
    """The record of a chunk discarded unrun: its items `cancelled` or `expired` (`why`); `first` is its message's
    first position where only some of its items are discarded (the others were recorded already)."""
    cancelled = list(positions) if why == "cancelled" else []
    expired = list(positions) if why == "expired" else []
    ids = item_ids(positions, items)
    return ResultRecord(header_batch, chunk, gen, attempt, [], [], [], {}, cancelled, expired, ids, first)


def past_last_attempt(attempt: int, max_attempts: int) -> bool:
    """Whether a delivery with no record of its lineage calls no handler (`unanswered`). `attempt` is its dequeue
    count less its skips, as every attempt is counted: a delivery that failed before the handler (storage down) or
    whose record's update was lost counts one too. So the one delivery after the last attempt still calls the
    handler, as before (any failure it returns is parked at once); a delivery past that one follows
    `max_attempts` + 1 deliveries none of which recorded an outcome: each handler call hung until the function's
    timeout, or its process died."""
    return attempt > max_attempts + 1


def unanswered(
    *,
    batch_id: str,
    chunk: int,
    gen: int,
    positions: Sequence[int],
    items: Sequence[Any],
    attempt: int,
    max_attempts: int,
) -> Settlement:
    """A chunk delivered past the delivery after its last attempt (`past_last_attempt`) with no outcome recorded
    for its lineage: no handler call of the deliveries before returned (each ended by the function's timeout or a
    crash). Every item parked failed, unrun, with the reason (a replay runs them again); its
    batch can then become final."""
    reason = (
        f"{NO_OUTCOME} after {attempt - 1} deliveries (MAX_DEQUEUE_COUNT {max_attempts}): no handler call returned "
        "(the function's timeout or a crash ended each)"
    )
    outcomes = [ItemOutcome.failure(reason, retryable=False)] * len(positions)
    return settle(batch_id=batch_id, chunk=chunk, gen=gen, positions=positions, outcomes=outcomes, attempt=attempt,
                  max_attempts=max_attempts, items=items)  # fmt: skip
