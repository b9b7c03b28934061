"""A replayed chunk is never stranded (issue 36 item 1), checked once the run is quiet.

A replay marks a parked chunk's items `retrying` in their record (its claim, stamped `replay_claimed_ms`), then
marks the lane and sends the chunk, the next generation, which records them again. A replay that fails between
the claim and the send gives the claim back (the items are failed again, still parked and replayable); one whose
process dies there leaves a claim, and its note (`shared.store.replay_claims`), which the timer's next tick once
the claim is CLAIM_S old takes over (`shared.ops.replay_takeover`: it finishes the replay), as a later replay
would. So at the end of a run no record holds items retrying under a replay's claim with no record of the lineage
that carries them (the parked chunk's own: its chunk, the next generation, its first position, as
`shared.ops.replay_marks.carrier` keys it), unless a crash (or a storage fault on every request, which the claim's
release may meet) came in the minute after the claim and neither a replay nor a timer tick untouched by storage
faults came once the claim could be taken over (lifecycle seed 606: a replay killed while its send failed, no
replay after it; the batch was `processing` for good before the timer took such claims over).
"""

from __future__ import annotations

from typing import Any

from shared.batch import envelope
from shared.batch.results import settled_positions
from shared.ops.replay_marks import CLAIM_S, CLAIMED, CLAIMED_MS
from shared.ops.replay_takeover import MARGIN_S
from sim.checks.promises import records_of
from sim.clock import EPOCH_S

STRANDED = "a replayed chunk stranded"
REOPENED = "a final batch reopened"
AFTER_CLAIM_S = 60.0  # a crash or an outage within this of a claim excuses the claim left behind
TAKEOVER_MARGIN_S = 10.0  # the instances' clocks are up to 3 s apart; a replay takes a few seconds

World = Any  # `sim.world.World` (it imports the checks that call this)


def never_stranded(world: World, batch_id: str) -> None:
    records = list(records_of(world, batch_id))
    lineages = {(r.get("chunk"), r.get("gen"), r.get("first")) for r in records}
    for record in records:
        # Items another record of the chunk settled are not held: a duplicate parked copy's record counts them
        # (lifecycle seed 582: a claim left on one copy's parent, the batch final by the other's).
        others = set().union(
            *(settled_positions(r) for r in records if r is not record and r.get("chunk") == record.get("chunk"))
        )
        claimed_ms, retrying = record.get(CLAIMED_MS), [p for p in held(record) if p not in others]
        if claimed_ms is None or not retrying or carrier(record, retrying) in lineages:
            continue
        at_s = int(claimed_ms) / 1000 - EPOCH_S
        if _excused(world, at_s):
            continue
        world.violate(
            f"batch {batch_id[:8]} chunk {record.get('chunk')}: items {retrying} marked retrying by a replay at "
            f"{at_s:.0f} s and no record of the lineage that carries them ({STRANDED})"
        )


def held(record: dict[str, Any]) -> list[int]:
    """The positions a replay's claim holds retrying in `record`: those it lists (`replay_claimed`), or, for a
    claim stamped before the positions were listed, every item retrying."""
    retrying = record.get("retrying") or []
    return sorted(set(retrying) & set(record.get(CLAIMED, retrying)))


def carrier(record: dict[str, Any], claimed: list[int]) -> tuple[Any, int, int]:
    """The lineage whose record carries the parked chunk a replay claimed in `record`: the next generation of the
    chunk, first position the parked chunk's own (the smallest it claimed). Not any record of that generation:
    the chunk's items retrying after a transient failure go on as a follow-up of the same generation, which
    carries none of the parked items."""
    return record.get("chunk"), int(record.get("gen", 0)) + 1, min(claimed)


def _excused(world: World, at_s: float) -> bool:
    """A crash or an outage came within a minute of the claim, and no replay and no timer tick clear of storage
    faults came once it could be taken over."""
    scenario = world.scenario
    if any(when >= at_s + CLAIM_S + TAKEOVER_MARGIN_S for when, _, _ in scenario.replays):
        return False
    due_s = at_s + CLAIM_S + MARGIN_S + TAKEOVER_MARGIN_S
    if any(began >= due_s and not _faulted(scenario, began, ended) for began, ended in world.takeovers):
        return False
    crashed = any(at_s - 5.0 <= c.at_s <= at_s + AFTER_CLAIM_S for c in scenario.crashes)
    outage = any(
        sp.op == "" and sp.kind != "slow" and sp.start_s <= at_s + AFTER_CLAIM_S and at_s <= sp.end_s
        for sp in scenario.storage_spans
    )
    return crashed or outage


def _faulted(scenario: Any, began: float, ended: float) -> bool:
    """A storage fault (not a slow answer) overlapped a tick's takeover: it may have left the note for later."""
    return any(sp.kind != "slow" and sp.start_s <= ended and began <= sp.end_s for sp in scenario.storage_spans)


def never_reopened(world: World, queue: str, text: str) -> None:
    """As storage applies a PutMessage: a chunk put on a work queue or lane while its batch is stamped final is a
    replay reopening it (docs/api.md, "Replay and final batches"). Only a submit, before its batch is accepted, and
    a replay put chunks there (a retry rewrites its message, a park puts it on a poison queue)."""
    settings = world.settings
    if queue in {settings.poison_queue(q) for q in settings.partition_queues()}:
        return
    try:
        header = envelope.decode(text).header
    except Exception:  # not a chunk (nothing else goes there, but this check is about chunks)
        return
    stamp = (world.manifest(header.batch_id) or {}).get("final_status")
    if stamp is not None:
        world.violate(f"batch {header.batch_id[:8]} chunk {header.chunk} put on {queue} after its batch was "
                      f"stamped {stamp} ({REOPENED})")  # fmt: skip
