"""Batch status, aggregated from the manifest and the listing of its result blobs (pure).

A lineage recorded twice (a redelivered chunk) counts once, by its newest record, and a generation counts no more
items than its predecessor carried: `shared.batch.results.settled_counts`, the rule the batch list, the export
and the failure tolerance count by too.

Each item is recorded exactly once: as ok or failed in the generation that settled it, or as
`retrying` in a generation whose successor carries it. No shared counter is ever written.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from shared.batch import lifecycle
from shared.batch.batches import Manifest, State
from shared.batch.results import KINDS, ResultEntry, newest, settled_counts

FINAL = ("completed", "completed_with_failures", "cancelled", "failed", "expired")


def batch_status(manifest: Manifest, entries: Iterable[ResultEntry], now: datetime | None = None) -> dict[str, Any]:
    entries = [e for e in newest(entries) if 0 <= e.chunk < manifest.chunks]
    by_chunk = settled_counts(entries, manifest.chunks, manifest.chunk_sizes)
    total = {kind: sum(c[kind] for c in by_chunk.values()) for kind in KINDS}
    succeeded, failed = total["ok"], total["failed"]
    done_chunks = {c for c, n in by_chunk.items() if sum(n.values()) >= manifest.chunk_sizes[c]}
    poisoned_chunks = {e.chunk for e in entries if e.failed > 0}
    accepted = manifest.state is State.ACCEPTED
    # Past its failure tolerance it is failed, whether or not the drainer that crossed it lived to end it.
    how_ended = manifest.ended or (lifecycle.FAILED if crossed_tolerance(manifest, failed) else None)
    # Ended long enough before its start that no chunk of it can ever run: final now, the rest cancelled.
    unstarted = accepted and lifecycle.never_started(manifest)
    complete = accepted and (len(done_chunks) == manifest.chunks or unstarted)
    if unstarted:
        total["cancelled"] = manifest.items - succeeded - failed - total["expired"]
        done_chunks = set(range(manifest.chunks))
    if complete:
        if how_ended is not None:
            status = how_ended  # cancelled | failed
        elif total["expired"]:
            status = "expired"
        else:
            status = "completed_with_failures" if failed else "completed"
    elif accepted and manifest.ended is not None:
        status = "cancelling"  # ended: its chunks are being discarded as drainers receive them
    elif manifest.state is State.ABANDONED:
        status = "abandoned"  # its submit answered 503: never accepted, its chunks are discarded
    elif manifest.state is State.STAGING:
        status = "submitting"  # no 202 yet (and none if its submit fails)
    elif entries:
        status = "processing"
    elif lifecycle.before_start(manifest.not_before, now):
        status = "scheduled"  # nothing of it is handled before not_before
    else:
        status = "accepted"
    items = {"total": manifest.items, "succeeded": succeeded, "failed": failed}
    ended = manifest.expires_at or manifest.ended or manifest.max_failed_fraction is not None
    if ended or total["cancelled"] or total["expired"]:  # batches without a lifecycle keep their old shape
        items |= {"cancelled": total["cancelled"], "expired": total["expired"]}
    items["pending"] = max(0, manifest.items - sum(total.values()))
    times = sorted(e.written_at for e in entries)
    return {
        "batch_id": manifest.batch_id,
        "status": status,
        "submission": "complete" if manifest.state is State.ACCEPTED else "incomplete",
        # Only a deferral is recorded (it costs a write); an accepted batch without one was announced.
        "trigger": manifest.trigger or ("published" if manifest.state is State.ACCEPTED else None),
        # Its lane (`shared.core.lanes`); the API adds the lane's depth while chunks are pending.
        "lane": {"tenant": manifest.tenant, "priority": manifest.priority},
        "items": items,
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
        "completed_at": (times[-1].isoformat() if times else manifest.ended_at) if complete else None,
        **lifecycle_view(manifest, how_ended),
    }


def crossed_tolerance(manifest: Manifest, failed: int) -> bool:
    """Not yet ended or stamped final, and more than its max_failed_fraction of its items failed for good: the
    drainer that recorded the crossing ends it (`shared.engine.chunks`), and should that drainer die or fail to,
    this rule makes it `failed` all the same, and `finalize` (`shared.ops.lifecycle`) ends it."""
    unjudged = manifest.ended is None and manifest.final_status is None and manifest.state is State.ACCEPTED
    return unjudged and lifecycle.tripped(failed, manifest.items, manifest.max_failed_fraction)


def failed_items(manifest: Manifest, entries: Iterable[ResultEntry]) -> int:
    """Its items failed for good, by the one counting rule."""
    counted = settled_counts(newest(entries), manifest.chunks, manifest.chunk_sizes).values()
    return sum(c["failed"] for c in counted)


def lifecycle_view(manifest: Manifest, how_ended: str | None = None) -> dict[str, Any]:
    """What the batch asked for and how it was ended (`how_ended`: as the status rule judged it), only where it
    has any."""
    fields = ("expires_at", "not_before", "max_failed_fraction", "ended_at")
    out = {name: getattr(manifest, name) for name in fields if getattr(manifest, name) is not None}
    how_ended = how_ended or manifest.ended
    if how_ended is not None:
        out["ended_by"] = "cancel" if how_ended == lifecycle.CANCELLED else "max_failed_fraction"
    return out
