"""A listed batch's progress from its index entry and its result listing (pure): counts, status, items per
second, time left and wake latency.

It needs no manifest: a batch is complete when every item is settled (succeeded or failed), which is when
every chunk is done. Items are counted by the status route's rule (`shared.batch.results.settled_counts`), so the
two agree. Its status is the batch's final stamp when the index entry carries one (`shared.store.batch_index`):
a cancel that ended the batch after its last record made it `cancelled`, though its records say `completed`.
A batch its records call complete whose entry carries no stamp is `unsure`: its manifest says (`judged`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from shared.batch import lifecycle
from shared.batch.batches import Manifest
from shared.batch.results import ResultEntry, newest, settled_counts
from shared.store.batch_index import IndexEntry

DONE = ("completed", "completed_with_failures")  # the final statuses the list shows as they are


def batch_progress(batch: IndexEntry, found: Iterable[ResultEntry], now: datetime) -> dict[str, Any]:
    entries = [e for e in newest(found) if 0 <= e.chunk < batch.chunks]
    counted = settled_counts(entries, batch.chunks).values()  # the status route's rule
    succeeded = sum(c["ok"] for c in counted)
    failed = sum(c["failed"] for c in counted)
    cancelled, expired = sum(c["cancelled"] for c in counted), sum(c["expired"] for c in counted)
    discarded = cancelled + expired  # of an ended or expired batch, never run
    settled = succeeded + failed
    complete = settled + discarded >= batch.items
    if batch.final is not None:
        status = list_status(batch.final)  # stamped: whatever its records say
    elif complete and (discarded or lifecycle.tripped(failed, batch.items, batch.max_failed_fraction)):
        status = "ended"  # cancelled, failed by its tolerance or expired: its own status route says which
    elif complete:
        status = "completed_with_failures" if failed else "completed"
    elif entries:
        status = "processing"
    elif lifecycle.before_start(batch.not_before, now):
        status = "scheduled"  # nothing of it is handled before not_before (the status route's rule)
    else:
        status = "accepted"
    times = sorted(e.written_at for e in entries)
    first, last = (times[0], times[-1]) if times else (None, None)
    accepted = datetime.fromisoformat(batch.accepted_at)
    rate = items_per_s(settled, accepted, last if complete else now)
    pending = max(0, batch.items - settled - discarded)
    items = {"total": batch.items, "succeeded": succeeded, "failed": failed}
    if discarded:  # as the status route shows them, so that the counts add up to the total
        items |= {"cancelled": cancelled, "expired": expired}
    shown = {"metadata": batch.metadata} if batch.metadata else {}
    return {
        "batch_id": batch.batch_id,
        "status": status,
        "tenant": batch.tenant,  # None for batches indexed before tenants were written
        "items": items | {"pending": pending},
        "chunks": {"total": batch.chunks, "poisoned": len({e.chunk for e in entries if e.failed})},
        "created_at": batch.created_at,
        "accepted_at": batch.accepted_at,
        "first_result_at": first.isoformat() if first else None,
        "last_result_at": last.isoformat() if last else None,
        "completed_at": last.isoformat() if complete and last else None,
        "wake_ms": round((first - accepted).total_seconds() * 1000) if first else None,
        "items_per_s": round(rate, 2) if rate else None,
        # Rounded up, to the tenth: only a complete batch has no time left.
        "eta_s": 0.0 if complete else (math.ceil(pending / rate * 10) / 10 if rate else None),
    } | shown


def list_status(final: str) -> str:
    """What the list shows of a final status (stamped, or as the status route judges an ended batch): `ended`
    for one cancelled, failed by its tolerance or expired (its status route says which)."""
    return final if final in DONE else "ended"


def unsure(batch: IndexEntry, progress: dict[str, Any]) -> bool:
    """Complete by its records, with no stamp in its entry: not stamped yet, or its entry's stamp write failed. A
    cancel may have ended it after its last record (its status route then says `cancelled`): read its manifest."""
    return batch.final is None and progress["status"] in DONE


def judged(batch: IndexEntry, manifest: Manifest) -> IndexEntry:
    """An `unsure` entry as its manifest judges it: its stamp, or how it was ended (the status route's status for
    a complete batch that was ended: `shared.ops.status`); unchanged if neither."""
    final = manifest.final_status or manifest.ended
    return replace(batch, final=final) if final is not None else batch


def items_per_s(settled: int, since: datetime, until: datetime | None) -> float | None:
    """Settled items over the time from acceptance (what the submitter waits), None before there is a rate."""
    if not settled or until is None:
        return None
    seconds = (until - since).total_seconds()
    return settled / seconds if seconds > 0 else None
