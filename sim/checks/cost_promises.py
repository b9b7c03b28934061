"""Costs a caller controls grow with the work asked for, not with history (issue 36 item 9), each held to what
docs/api.md states for it, counted per operation (`sim.storage.charges`, `sim.checks.costs`) in listing pages of the
scenario's size:

- a cancel: a manifest read and write, the marker's write, one listing of the ten minutes' markers that just aged
  past KEEP_S and a delete for each, and the batch's status (a manifest read and a listing of its results, twice):
  at most CANCEL_BASE requests, a listing page per page of result blobs three times (its status, its finalize,
  its status again), and the aged bucket's pages and deletes, however many markers a week of cancels left;
- a drainer's look at the ended batches, but a process's first (which reads them all): only the ten minutes'
  buckets written since its previous look began (less the look-back), a listing page per page of their markers;
- a page of a final batch's results: a manifest read, a listing page per page of result blobs, and a read of each
  result blob holding records of the chunks the page's positions span.

Only calls during which storage answered every request at once (no 5xx, timeout or lost answer: each costs the SDK
a retry) are held to the figure.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from shared.api import ApiResponse
from shared.batch import results
from shared.core import layout
from shared.ops.status import FINAL
from shared.store import ended
from sim.checks.costs import Look, markers, page_size, pages
from sim.clock import EPOCH_S
from sim.storage.charges import Spent

# The world (`sim.world.World`) is passed in, not imported: it imports this module.
World = Any

# A cancel: four manifest reads (its status before, its end, its finalize, its status after), the manifest's
# write and the marker's, a final stamp, the stamp in the batch's two index entries and its notice if the cancel
# made the batch final, and one more read and write when the manifest changed under the end (its ETag); the
# listings are counted apart.
CANCEL_BASE = 12
PAGE_BASE = 1  # a results page: the manifest's read; the listings and the blob reads are counted apart
FAULTS = ("5xx", "timeout", "lost")  # storage faults that cost a retry
SKEW_S = 5.0  # a host's clock against the world's, with margin (the buckets a listing names are by its clock)
CANCEL_COST = "a cancel cost"
LOOK_COST = "a look at the ended batches cost"
PAGE_COST = "a results page cost"


def clean(world: World, began_s: float) -> bool:
    """No storage fault that costs a retry was planned while the call ran."""
    now = world.now_s()
    return not any(s.kind in FAULTS and s.start_s < now and s.end_s > began_s for s in world.scenario.storage_spans)


def result_blobs(world: World, batch_id: str) -> dict[str, Any]:
    blobs: dict[str, Any] = world.account.containers.get(world.settings.results_container, {})
    prefix = layout.results_prefix(batch_id)
    return {name: blob for name, blob in blobs.items() if name.startswith(prefix)}


def apart_reads(world: World, batch_id: str) -> int:
    """The result blobs a status read of the batch reads: those holding records of a chunk whose copies recorded
    one generation apart (`shared.store.result_store.list_counted`), counted from what is stored now."""
    found = [e for name, blob in result_blobs(world, batch_id).items()
             for e in results.entries(name, blob.metadata or {}, datetime.now(timezone.utc))]  # fmt: skip
    apart = results.apart(found)
    return len({e.blob for e in found if e.chunk in apart})


def _bucket(at_s: float) -> str:
    return f"{ended.PREFIX}{ended.bucket(datetime.fromtimestamp(at_s, timezone.utc))}/"


def cancel_cost(world: World, spent: Spent, batch_id: str, began_s: float) -> None:
    if world.marker_history:
        world.features.add("history")
    if not clean(world, began_s):
        return
    page, now = page_size(world), world.world_time()
    aged_at = now - ended.KEEP_S - ended.BUCKET_S
    aged = max(world.marker_history.get(_bucket(aged_at + d), 0) for d in (-SKEW_S, 0.0, SKEW_S))
    stated = CANCEL_BASE + 3 * pages(len(result_blobs(world, batch_id)), page) + pages(aged, page) + aged
    stated += 3 * apart_reads(world, batch_id)  # each status read of a chunk two copies recorded apart (list_counted)
    cost = len(spent.requests)
    if cost > stated:
        world.violate(
            f"{CANCEL_COST} {cost} storage requests ({spent.count('ListBlobs', ended.PREFIX)} listings of ended "
            f"markers, {spent.count('DeleteBlob')} deletes) for batch {batch_id[:8]}, stated at most {stated} with "
            f"{markers(world, ended.PREFIX)} markers in storage (pages of {page})"
        )


def look_cost(world: World, look: Look) -> None:
    """A look after the process's first: the buckets since its previous look began, each a page per page."""
    if look.after_s is None or not clean(world, look.began_s):
        return
    since = datetime.fromtimestamp(EPOCH_S + look.after_s - SKEW_S, timezone.utc)
    buckets = ended.buckets_since(since, datetime.fromtimestamp(world.world_time() + SKEW_S, timezone.utc))
    if buckets is None:  # its previous look is too long ago: it reads them all, as a first one does
        return
    page = page_size(world)
    stated = sum(pages(markers(world, prefix), page) for prefix in buckets)
    cost = len(spent_requests := look.spent.requests)
    listed = sum(r.listed for r in spent_requests)
    if cost > stated:
        world.violate(
            f"{LOOK_COST} {cost} listing requests ({listed} markers listed) at {look.instance}, stated at most "
            f"{stated}: the {len(buckets)} ten minutes' buckets since its previous look "
            f"({markers(world, ended.PREFIX)} markers in storage, pages of {page})"
        )


def page_cost(world: World, spent: Spent, batch_id: str, start: int, limit: int, response: ApiResponse,
              began_s: float) -> None:  # fmt: skip
    """A page of a final batch's results, filled by the chunks its positions span."""
    if response.status != 200 or response.headers.get("X-Batch-Status") not in FINAL or not clean(world, began_s):
        return
    manifest = world.manifest(batch_id)
    if manifest is None:
        return
    positions = [json.loads(line)["position"] for line in (response.raw or b"").decode().splitlines() if line]
    if positions != list(range(start, start + min(limit, manifest["items"] - start))):
        return  # some item had no line (yet): the export reads on, as it says
    ends, chunks = 0, set()
    for chunk, size in enumerate(manifest["chunk_sizes"]):
        if ends < start + limit and ends + size > start:
            chunks.add(chunk)
        ends += size
    blobs = result_blobs(world, batch_id)
    holding = sum(
        1
        for name, blob in blobs.items()
        if any(e.chunk in chunks for e in results.entries(name, blob.metadata, _when(blob.modified_s)))
    )
    page = page_size(world)
    stated = PAGE_BASE + pages(len(blobs), page) + holding
    cost = len(spent.requests)
    if cost > stated:
        world.violate(
            f"{PAGE_COST} {cost} storage requests ({spent.count('GetBlob')} blob reads) for {len(positions)} "
            f"line(s) of batch {batch_id[:8]} from position {start}, stated at most {stated}: its {len(chunks)} "
            f"chunk(s) are in {holding} of its {len(blobs)} result blobs"
        )


def _when(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, timezone.utc)
