"""Batch status, aggregated from the manifest and the listing of its result blobs (pure).

A lineage recorded twice (a redelivered chunk) counts once, by its newest record (`shared.batch.results`), and a
generation counts no more items than its predecessor carried (`settled_by_chunk`, which the batch list counts by
too).

Each item is recorded exactly once: as ok or failed in the generation that settled it, or as
`retrying` in a generation whose successor carries it. No shared counter is ever written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from shared.batch.batches import Manifest, State
from shared.batch.results import ResultEntry, newest


def settled_by_chunk(
    entries: Iterable[ResultEntry], chunks: int, sizes: Sequence[int] | None = None
) -> dict[int, tuple[int, int]]:
    """(succeeded, failed) per chunk with a record, each item counted once: the one rule the status route and
    the batch list both count by.

    A lineage recorded twice counts once, by its newest record. A generation carries only the items its
    predecessor holds as `retrying`, so it counts at most that many: should a parked item be replayed while its
    original is still redelivered, and the original then settle it, the predecessor's newest record holds it as
    settled and no longer as retrying, and the replayed generation's record of it is not counted again. The
    first generation counts at most its chunk's size, where `sizes` are known."""
    totals: dict[tuple[int, int], list[int]] = {}
    for e in newest(entries):
        if 0 <= e.chunk < chunks:
            counts = totals.setdefault((e.chunk, e.gen), [0, 0, 0])
            counts[0], counts[1], counts[2] = counts[0] + e.ok, counts[1] + e.failed, counts[2] + e.retrying
    out: dict[int, tuple[int, int]] = {}
    carried: dict[tuple[int, int], int] = {}  # (chunk, gen): how many items that generation hands to the next
    for chunk, gen in sorted(totals):
        ok, failed, retrying = totals[(chunk, gen)]
        if chunk not in out:  # its first generation with a record
            allowed = sizes[chunk] if sizes is not None else ok + failed + retrying
            counted_ok, counted_failed = 0, 0
        else:
            counted_ok, counted_failed = out[chunk]
            allowed = carried.get((chunk, gen - 1), ok + failed + retrying)
        failed = min(failed, allowed)
        ok = min(ok, allowed - failed)
        carried[(chunk, gen)] = min(retrying, allowed - failed - ok)
        out[chunk] = (counted_ok + ok, counted_failed + failed)
    return out


def batch_status(manifest: Manifest, entries: Iterable[ResultEntry]) -> dict[str, Any]:
    entries = [e for e in newest(entries) if 0 <= e.chunk < manifest.chunks]
    counted = settled_by_chunk(entries, manifest.chunks, manifest.chunk_sizes)
    ok_by_chunk = {c: ok for c, (ok, _) in counted.items()}
    failed_by_chunk = {c: failed for c, (_, failed) in counted.items()}
    succeeded = sum(ok_by_chunk.values())
    failed = sum(failed_by_chunk.values())
    settled = {c: ok_by_chunk[c] + failed_by_chunk[c] for c in ok_by_chunk}
    done_chunks = {c for c, n in settled.items() if n >= manifest.chunk_sizes[c]}
    poisoned_chunks = {e.chunk for e in entries if e.failed > 0}
    complete = manifest.state is State.ACCEPTED and len(done_chunks) == manifest.chunks
    if complete:
        status = "completed_with_failures" if failed else "completed"
    elif manifest.state is State.ABANDONED:
        status = "abandoned"  # its submit answered 503: never accepted, its chunks are discarded
    elif manifest.state is State.STAGING:
        status = "submitting"  # no 202 yet (and none if its submit fails)
    elif entries:
        status = "processing"
    else:
        status = "accepted"
    times = sorted(e.written_at for e in entries)
    return {
        "batch_id": manifest.batch_id,
        "status": status,
        "submission": "complete" if manifest.state is State.ACCEPTED else "incomplete",
        # Only a deferral is recorded (it costs a write); an accepted batch without one was announced.
        "trigger": manifest.trigger or ("published" if manifest.state is State.ACCEPTED else None),
        # Its lane (`shared.core.lanes`); the API adds the lane's depth while chunks are pending.
        "lane": {"tenant": manifest.tenant, "priority": manifest.priority},
        "items": {
            "total": manifest.items,
            "succeeded": succeeded,
            "failed": failed,
            "pending": max(0, manifest.items - succeeded - failed),
        },
        "chunks": {
            "total": manifest.chunks,
            "done": len(done_chunks),
            "poisoned": len(poisoned_chunks),
            "pending": manifest.chunks - len(done_chunks),
        },
        "created_at": manifest.created_at,
        "accepted_at": manifest.accepted_at,
        "first_result_at": times[0].isoformat() if times else None,
        "last_result_at": times[-1].isoformat() if times else None,
        "completed_at": times[-1].isoformat() if complete and times else None,
    }
