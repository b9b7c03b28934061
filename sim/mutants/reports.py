"""Defects in what the reports say, caught by the final checks (`sim.checks.final`): the status route counts every item
once, the batch list agrees with it, the export lists each position once with its counts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.batch import results
from shared.batch.results import settled_counts
from shared.engine import chunks
from shared.ops import lifecycle, progress, reports, status
from shared.store.result_store import list_entries
from sim.mutants.base import Mutant, scoped, swap


@contextmanager
def _status_without_size_clamp() -> Iterator[None]:
    """Issue 18 item 7 (e89735c): the status route counts a chunk's first generation as recorded, not at most
    the chunk's size."""

    def unclamped(entries: Any, chunks: int, sizes: Any = None) -> dict[int, dict[str, int]]:
        return settled_counts(entries, chunks)

    yield from swap(status, "settled_counts", unclamped)


@contextmanager
def _list_counts_raw() -> Iterator[None]:
    """Item 12: the batch list sums the newest record of every lineage as it stands, where the status route
    counts a generation only up to what its predecessor carried (`settled_counts`)."""

    def raw(entries: Any, chunks: int, sizes: Any = None) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for e in results.newest(entries):
            counts = out.setdefault(e.chunk, dict.fromkeys(results.KINDS, 0))
            counts["failed"] += e.failed
            counts["ok"] += e.ok
            counts["cancelled"] += e.cancelled
            counts["expired"] += e.expired
        return out

    yield from swap(progress, "settled_counts", raw)


@contextmanager
def _export_line_per_record() -> Iterator[None]:
    """The export writes an item once per record that holds it (two generations of a chunk, or two copies of it,
    both recording it), not once per position."""
    chunk_lines = lifecycle._chunk_lines

    def lines(records: list[dict[str, Any]], start: int, size: int, unstarted: bool) -> list[dict[str, Any]]:
        out = [line for record in records for line in chunk_lines([record], start, size, False)]
        listed = {line["position"] for line in out}
        out += [line for line in chunk_lines(records, start, size, unstarted) if line["position"] not in listed]
        return sorted(out, key=lambda line: line["position"])

    yield from swap(lifecycle, "_chunk_lines", lines)


@contextmanager
def _export_takes_any_failure_first() -> Iterator[None]:
    """The fix reverted (replay seed 420): the export says `failed` of an item any counted record holds failed,
    whatever its generation, where the status route counts a generation only up to what its predecessor left
    retrying (`results.item_outcomes`)."""

    def lines(records: list[dict[str, Any]], start: int, size: int, unstarted: bool) -> list[dict[str, Any]]:
        found: dict[int, dict[str, Any]] = {}
        for record in records:
            for f in record.get("failed") or []:
                found.setdefault(f["i"], {"status": "failed", "reason": f.get("reason")})
        for record in records:
            for p, value in results.successes(record):
                found.setdefault(p, {"status": "succeeded", "value": value})
        for kind in ("cancelled", "expired"):
            for record in records:
                for p in record.get(kind) or []:
                    found.setdefault(p, {"status": kind})
        if unstarted:
            for p in range(size):
                found.setdefault(p, {"status": "cancelled"})
        return [{"position": start + p} | found[p] for p in sorted(x for x in found if 0 <= x < size)]

    yield from swap(lifecycle, "_chunk_lines", lines)


@contextmanager
def _counts_blind_to_copies() -> Iterator[None]:
    """405e502 put back: every chunk is counted from the listing's counts, a chunk whose two copies recorded one
    generation apart too (the status route may count an item twice, or done while its retry is still to run)."""
    with scoped(reports, "list_counted", list_entries), scoped(lifecycle, "list_counted", list_entries):
        with scoped(chunks, "list_counted", list_entries):
            yield


@contextmanager
def _copies_newest_only() -> Iterator[None]:
    """The merge put back: a lineage two copies recorded counts by its newest record alone, though the copies
    carried different items under it (an item only the older record settled is left pending for good)."""

    def newest_only(records: Any) -> dict[str, Any]:
        return dict(records[-1])

    yield from swap(results, "merged", newest_only)


MUTANTS = [
    Mutant("status-without-size-clamp", "e89735c (issue 18 item 7)", "the status route counts a chunk's first "
           "generation as recorded", _status_without_size_clamp,
           why="issue 26 item 12's counting rule already counts a generation at most what its predecessor carried: the "
               "clamp is a second guard"),
    Mutant("list-counts-raw", "71e88d8 (issue 26 item 12)", "the batch list counts every newest record as it "
           "stands, the status route by the counting rule", _list_counts_raw, family="storage",
           expect="the list says", invariant="the batch list agrees with the status route",
           why="caught by storage seed 28 until 405e502: a chunk two copies recorded apart, the only kind whose newest "
               "records hold more than their predecessors carried, is now counted by position before either rule "
               "sees it, so raw counts equal the rule's there; not in 300 storage, 300 copies or 300 replay seeds. "
               "Plan: a replayed generation recorded beside its original's settling record, the one case left where "
               "the rule's cap counts"),
    Mutant("export-line-per-record", "none (made here)", "the export lists an item once per record holding it",
           _export_line_per_record, family="storage", expect="the export has",
           invariant="the export agrees with the status route"),
    Mutant("export-takes-any-failure-first", "9f48e5b (issue 37, replay seed 420)", "the export says failed of "
           "an item a later generation of one copy parked while an earlier generation of the other copy recorded it "
           "ok, the status route counts it succeeded", _export_takes_any_failure_first, family="copies",
           expect="the export has", seeds=1000, invariant="the export agrees with the status route"),
    Mutant("counts-blind-to-copies", "405e502", "the status route, the list, finalize and the tolerance count a "
           "chunk whose two copies recorded one generation apart from the listing's counts alone",
           _counts_blind_to_copies, family="copies", expect="pending",
           invariant="every accepted batch is complete with nothing pending once quiet (`sim.checks.final`)"),
    Mutant("copies-newest-only", "8be8665 (copies seed 48)", "a lineage two copies of a chunk message "
           "recorded with different items counts by its newest record alone: an item only the older record "
           "settled stays pending for good",
           _copies_newest_only, family="copies", expect="pending",
           invariant="every accepted batch is complete with nothing pending once quiet (`sim.checks.final`)"),
]  # fmt: skip
