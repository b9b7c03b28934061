"""Defects put back into the app's code, one at a time, to show the simulator catches them (RELIABILITY.md,
"The simulation": the revert table). Each mutant is a patch applied in this process for the length of its
runs; the app's files are untouched. `python -m sim.mutants [--only NAME[,NAME]] [--seeds N] [--family F]`
prints, per mutant, the first seed of its family that fails with it in place (and not the same way without
it) and the invariant that failed, or that none did within its seed budget.

One module per family of defects, each beside the invariant that guards against them: `admission` (handler calls of
uncommitted or replaced attempts, what a submit answers), `looks` (the look bound), `engine` (held messages, handler
limits, high starts, time, errors), `reports` (the status route, the batch list, the export), `costs` (storage
transactions), `idle` (what an idle app costs), `lifecycle` (cancel, expiry, stamps, notices, replay), `outcomes` (what
an item ends as), `replaying` (what a replay promises its caller), `notices` (notice attempts, the callback allow list,
what the status route shows of a failed attempt), `carriers` (a replay's carrier), `claims` (a drainer's claim on the
handler limits), `counts` (a drainer's counts of it, one at a time), `lapse` (handler calls past their drainer's lease),
`places` (a sync call's place kept till its thread returns), `records` (a record's positions), `redelivery` (a recorded
chunk that comes back), `history` (the cancel bound under late listings, costs that grow with history), `doorbells`
(scheduled doorbells, a flood's late ones), `requests` (how a malformed request is refused), `replay_bounds` (a replay's
time, the stale copies it leaves), `replay_steps` (what a killed background step leaves), `unanswered` (a chunk whose
handler never returns), `takeover` (a replay killed after its claim), `liststamp` (the batch list's status of a
stamped batch), `budget_places` (a chunk that gets its place past its session's budget), `status_final` (a final
status the status route answered before its stamp), `stamp_order` (a notice stored before its stamp). `hunting`
hunts the seeds (in parallel processes), `runner` is the command, `verify` tries each row of the table as measured
again.

A defect this cannot catch is in the table too, with why (a path the simulated world never takes, a fault it
does not model). A fix that cannot be put back as a patch of today's code has no mutant.
"""

from __future__ import annotations

from sim.mutants import (
    admission,
    budget_places,
    carriers,
    claims,
    costs,
    counts,
    doorbells,
    engine,
    history,
    idle,
    lapse,
    lifecycle,
    liststamp,
    looks,
    notices,
    outcomes,
    places,
    records,
    redelivery,
    replay_bounds,
    replay_steps,
    replaying,
    reports,
    requests,
    stamp_order,
    status_final,
    takeover,
    unanswered,
)
from sim.mutants.base import Mutant

MUTANTS: list[Mutant] = [
    *admission.MUTANTS,
    *looks.MUTANTS,
    *engine.MUTANTS,
    *reports.MUTANTS,
    *costs.MUTANTS,
    *lifecycle.MUTANTS,
    *outcomes.MUTANTS,
    *replaying.MUTANTS,
    *notices.MUTANTS,
    *idle.MUTANTS,
    *carriers.MUTANTS,
    *claims.MUTANTS,
    *lapse.MUTANTS,
    *places.MUTANTS,
    *counts.MUTANTS,
    *records.MUTANTS,
    *redelivery.MUTANTS,
    *history.MUTANTS,
    *doorbells.MUTANTS,
    *requests.MUTANTS,
    *replay_bounds.MUTANTS,
    *replay_steps.MUTANTS,
    *unanswered.MUTANTS,
    *takeover.MUTANTS,
    *liststamp.MUTANTS,
    *budget_places.MUTANTS,
    *status_final.MUTANTS,
    *stamp_order.MUTANTS,
]

__all__ = ["MUTANTS", "Mutant"]
