"""Batch status, aggregated from the manifest and the listing of its result blobs (pure).

A lineage recorded twice (a redelivered chunk) counts once, by its newest record (`shared.batch.results`).

Each item is recorded exactly once: as ok or failed in the generation that settled it, or as
`retrying` in a generation whose successor carries it. No shared counter is ever written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.batch.batches import Manifest, State
from shared.batch.results import ResultEntry, newest


def batch_status(manifest: Manifest, entries: Iterable[ResultEntry]) -> dict[str, Any]:
    entries = [e for e in newest(entries) if 0 <= e.chunk < manifest.chunks]
    ok_by_chunk: dict[int, int] = {}
    failed_by_chunk: dict[int, int] = {}
    for e in entries:
        ok_by_chunk[e.chunk] = ok_by_chunk.get(e.chunk, 0) + e.ok
        failed_by_chunk[e.chunk] = failed_by_chunk.get(e.chunk, 0) + e.failed
    # A chunk never settles more items than it holds: should two lineages ever both record one item (a
    # parked copy replayed after a redelivery settled it), the surplus is not counted again.
    for c, ok in ok_by_chunk.items():
        failed_by_chunk[c] = min(failed_by_chunk[c], manifest.chunk_sizes[c])
        ok_by_chunk[c] = min(ok, manifest.chunk_sizes[c] - failed_by_chunk[c])
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
