"""The revert table cannot rot silently: a few of its defects, each put back (`sim.mutants`) and run on the seed
that caught it, still fail by the invariant that caught it, and today's code passes those seeds. The whole table
is `python -m sim.mutants` (RELIABILITY.md, "The simulation")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from shared.batch import results
from shared.batch.verdicts import CommittedAttempts
from shared.bus.deferrals import DeferredTriggers
from shared.core import webhooks
from shared.core.lanes import LaneOrder
from shared.engine import chunks, drainer, lane_watch, serve, settling, wakeups
from shared.engine.chunks import ChunkWork
from shared.engine.drainer import Drainer
from shared.engine.fair_slots import FairSlots
from shared.engine.held import HeldMessages
from shared.engine.limits import HandlerLimits
from shared.engine.settling import Settler
from shared.engine.wakeups import Wakeups
from shared.intake import doorbells, submit
from shared.ops import lifecycle, notice_sweep, notices, progress, replay, replay_marks, status
from shared.store import ended, leases
from shared.watch import fallback, lookout
from sim.mutants import MUTANTS, Mutant
from sim.mutants.table import Result, render
from sim.platform import FEATURES
from sim.world import run
from tests.sim.test_seeds import FAULTY_SEEDS, LIMITS_SEEDS, PRIORITY_SEEDS, STORAGE_SEEDS, SUBMIT_SEEDS

# (mutant, the seed of its family that caught it): the table's figures, kept to the fast ones.
CAUGHT = [
    ("high-burst-unbounded", 1),  # priority: HIGH_BURST x RECEIVE_BATCH high starts in a row
    ("transient-recorded-ok", 1),  # random: outcomes as the handler returned them (sim.checks.promises)
    ("stamp-not-the-status", 1),  # random: a final stamp is the status route's
    ("retry-delay-in-seconds", 2),  # random: liveness from the last fault
    ("tolerance-judged-once", 0),  # lifecycle: no batch completes past its max_failed_fraction (issue 36 item 7)
    ("keyed-retry-rings-nothing", 19),  # submit: a look after a 202
    ("final-batch-replayed", 2),  # lifecycle: a final stamp is the status route's (issue 36 item 12)
    ("sync-judged-before-the-pool", 26),  # lifecycle: no sync call past expires_at (issue 36 items 4, 13)
    ("discard-replaces-outcome", 2),  # lifecycle: cancelled or expired only unrun (issue 36 item 2)
    ("replay-strands-chunk", 17),  # lifecycle: a replayed chunk is never stranded (issue 36 item 1)
    ("notice-lost-at-kill", 11),  # lifecycle: every final batch with a callback gets its notice (issue 36 item 3)
    ("recorded-lineage-worked-again", 295),  # lifecycle: a notice never contradicts the final status (a t4/t5 item)
    ("closed-chunks-starve-replay", 1),  # replay: a synchronous replay makes progress (issue 36 item 5)
    ("keyed-retry-rings-at-once", 4),  # schedule: progress (issue 36 item 6, the keyed half)
    ("deferred-doorbell-rings-at-once", 3),  # schedule: progress (issue 36 item 6, the deferral half)
    ("doorbell-before-visible", 3),  # schedule: progress (the scheduled doorbell's margin)
    ("late-doorbells-drain", 3),  # flood: a late doorbell costs no storage call (issue 36 item 16)
    ("null-widens-replay", 2),  # replay: a replay takes only what it was asked for (issue 36 item 15)
    ("notice-claim-held-for-the-delay", 82),  # lifecycle: one notice's attempts never overlap (issue 36 item 10)
    ("notice-redelivered-past-the-deadline", 9),  # lifecycle: no attempt but the first past the deadline (item 10)
    ("callback-allowed-by-host", 0),  # lifecycle: no submit or POST to another origin (issue 36 item 14)
    ("notice-error-shown-raw", 1),  # lifecycle: no API answer carries the receiver's words (issue 36 item 14)
    ("lane-depths-every-tick", 0),  # idle: storage transactions an hour while idle within the README's budget
    ("discard-names-batch-positions", 31),  # lifecycle: a record holds only its chunk's positions
    ("slow-listing-taken-as-fresh", 34),  # history: the cancel bound under a look answered late (issue 36 item 8)
    ("cancel-prunes-every-marker", 0),  # history: a cancel costs what docs/api.md states (issue 36 item 9)
    ("look-lists-every-marker", 0),  # history: a drainer's look costs what docs/api.md states (issue 36 item 9)
    ("page-reads-a-window", 0),  # history: a results page costs what docs/api.md states (issue 36 item 9)
    ("replay-rings-at-end", 155),  # replay: a replay announces what it puts back (the audit's; issue 26 item 5)
    ("lease-renewed-once-per-period", 2),  # limits: calls in flight never above HANDLER_MAX_IN_FLIGHT (the audit's)
    ("no-look-chain", 1),  # storage, every doorbell lost: the look bound after a 202
    ("delete-before-record", 9),  # storage, result writes failing: every accepted batch completes
    ("doorbell-attempt-is-storage-word", 8),  # submit, forged doorbells: every accepted batch completes
    ("no-continuation-at-budget", 2),  # platform: no lost wake-up (sim.checks.wakeups)
    ("export-line-per-record", 28),  # storage: the export lists each position once
    ("own-commit-is-a-conflict", 10),  # submit: a 409 only while another request of its key is in flight
    ("background-null-is-foreground", 2),  # replay: a malformed request is a 4xx naming it (issue 26 item 2)
    ("int-parsed-before-its-length", 0),  # replay: a malformed request is a 4xx naming it (issue 26 item 3)
    ("replay-ids-unchecked", 0),  # replay: a malformed request is a 4xx naming it, no job written (issue 26 item 4)
    ("replay-unbounded-in-time", 9),  # replay: a synchronous replay takes no chunk after 60 s (issue 26 item 2)
    ("steps-sized-by-rate", 2),  # replay: a replay step ends within the drain budget (issue 26 item 10)
    ("stale-copies-kept", 23),  # replay: no stale parked copy left after a replay of everything (issue 26 item 15)
    ("step-progress-at-its-end", 28),  # replay: a job's progress counts every chunk a killed step took (issue 37)
    ("arm-storage-failure-left-to-timer", 110),  # storage, doorbells lost: a look after a 202 (issue 37)
    ("look-named-late-kept", 889),  # storage, doorbells lost: a look after a 202 (issue 37)
    ("sync-place-given-back", 627),  # replay: calls in flight within HANDLER_MAX_IN_FLIGHT (a sync call's place)
    ("hung-chunk-delivered-forever", 1),  # limits, a chunk hanging at every call: every chunk gone within an hour
    ("dead-replay-left-to-a-replay", 606),  # lifecycle, a replay killed after its claim: no replayed chunk stranded
    ("notice-before-stamp", 18),  # stale-cancel: a notice never contradicts the batch's final status (3625368)
    ("claim-kept-at-set-aside", 504),  # lifecycle: a dead replay's claim given back as its chunk is set aside
    ("list-blind-to-the-stamp", 132),  # lifecycle: the batch list shows a stamped batch's final status (a stale cancel)
    ("held-admitted-past-budget", 734),  # lifecycle: a session ends within its budget + 60 s (a cancelled page)
    ("status-answers-unstamped-final", 1),  # stale-cancel: a final status once answered never changes (issue 37)
    ("export-takes-any-failure-first", 956),  # copies: the export agrees with the status route (replay seed 420)
    ("counts-blind-to-copies", 48),  # copies: every accepted batch ends with nothing pending
    ("copies-newest-only", 48),  # copies: every accepted batch ends with nothing pending (two copies, one lineage)
    ("replay-claim-unfenced", 0),  # straddle: a replay never reopens a batch stamped final (replay seed 787)
]
# Rows once here whose seeds moved with the world's doors and the app's changes (none fails its old seed any
# more, checked by hand: no-look-chain 2 (now `storage` 1, its doorbells lost), receive-without-share 6,
# keyed-retry-rings-nothing 23 (now 19), list-counts-raw and export-line-per-record 97 (now `storage` 31; then 28,
# and list-counts-raw not caught since 405e502, its row says why),
# ended-marker-goes-at-last-record 59 (now `lifecycle` 154, too slow for this file), sub-resolution-wait 23,
# calls-outlive-the-lease 101 (not caught in 300 `limits` seeds once a drainer counts one count at a time, ec46cfc)):
# they come back with the seeds `python -m sim.mutants` finds for them (RELIABILITY.md's table).
# The promises of issue 37 item 2, each with a mutant that it alone catches: on its seed, every violation the mutant
# brings names that promise.
ALONE = [
    "transient-recorded-ok",
    "stamp-not-the-status",
    "retry-delay-in-seconds",
    "tolerance-judged-once",
    "discard-replaces-outcome",
    "closed-chunks-starve-replay",
    "null-widens-replay",
    "notice-claim-held-for-the-delay",
    "notice-redelivered-past-the-deadline",
    "callback-allowed-by-host",
    "notice-error-shown-raw",
    "lane-depths-every-tick",
    "discard-names-batch-positions",
    "cancel-prunes-every-marker",
    "look-lists-every-marker",
    "page-reads-a-window",
    "doorbell-before-visible",
    "late-doorbells-drain",
    "replay-rings-at-end",
    "no-continuation-at-budget",
    "step-progress-at-its-end",
    "status-answers-unstamped-final",
    "replay-claim-unfenced",
]
BY_NAME = {m.name: m for m in MUTANTS}
# Rows whose runs take seconds each (hundreds of virtual seconds of notice retries, replays, floods, parked chunks),
# their baselines too unless a fast row shares the seed: in `make test`, not test-fast (under a minute).
SLOW = {"notice-claim-held-for-the-delay", "notice-redelivered-past-the-deadline", "callback-allowed-by-host",
        "notice-error-shown-raw", "carrier-any-of-the-generation", "slow-listing-taken-as-fresh",
        "cancel-prunes-every-marker", "look-lists-every-marker", "page-reads-a-window",
        "no-continuation-at-budget", "closed-chunks-starve-replay", "late-doorbells-drain", "replay-strands-chunk",
        "replay-rings-at-end", "null-widens-replay", "discard-names-batch-positions",
        "sync-judged-before-the-pool", "discard-replaces-outcome", "final-batch-replayed",
        "tolerance-judged-once", "retry-delay-in-seconds", "lane-depths-every-tick", "stale-copies-kept",
        "replay-unbounded-in-time", "int-parsed-before-its-length", "replay-ids-unchecked",
        "calls-outlive-the-lease", "claim-lowered-after-write", "recorded-lineage-worked-again",
        "hung-chunk-delivered-forever", "dead-replay-left-to-a-replay", "claim-kept-at-set-aside",
        "sync-place-given-back", "replay-claim-unfenced", "background-null-is-foreground",
        "lease-renewed-once-per-period", "steps-sized-by-rate", "step-progress-at-its-end",
        "held-admitted-past-budget"}  # fmt: skip


def _params(rows: list[tuple[str, int]], slow: set[tuple[str, int]]) -> list[Any]:
    return [pytest.param(*row, marks=pytest.mark.slow) if row in slow else row for row in rows]


@pytest.mark.parametrize(("name", "seed"), _params(CAUGHT, {row for row in CAUGHT if row[0] in SLOW}))
def test_a_defect_put_back_fails_its_seed_by_the_invariant_that_caught_it(name: str, seed: int) -> None:
    mutant = BY_NAME[name]
    with mutant.patch():
        outcome = run(seed, family=mutant.family)
    assert any(mutant.expect in v for v in outcome.violations), outcome.report()
    if name in ALONE:
        assert all(mutant.expect in v for v in outcome.violations), outcome.report()


# Those seeds that the fixed set (test_seeds.py) does not run already.
FIXED = {("random", s) for s in FAULTY_SEEDS} | {("submit", s) for s in SUBMIT_SEEDS}
FIXED |= {("limits", s) for s in LIMITS_SEEDS} | {("storage", s) for s in STORAGE_SEEDS}
FIXED |= {("priority", s) for s in PRIORITY_SEEDS}
BASELINES = sorted({(BY_NAME[name].family, seed) for name, seed in CAUGHT} - FIXED)
FAST_BASELINES = {(BY_NAME[name].family, seed) for name, seed in CAUGHT if name not in SLOW}


@pytest.mark.parametrize(("family", "seed"), _params(BASELINES, set(BASELINES) - FAST_BASELINES))
def test_today_s_code_passes_those_seeds(family: str, seed: int) -> None:
    outcome = run(seed, family=family)
    assert outcome.ok, outcome.report()


def _attributes() -> dict[tuple[str, str], Any]:
    owners: list[Any] = [drainer, Drainer, HeldMessages, LaneOrder, FairSlots, HandlerLimits, wakeups, Wakeups, submit,
                         progress, status, lifecycle, lookout, lookout.Chain, fallback, lane_watch, results, chunks,
                         ChunkWork, settling, Settler, leases, CommittedAttempts, notice_sweep, notices,
                         webhooks, replay_marks, ended, serve, doorbells, DeferredTriggers, replay]  # fmt: skip
    return {(repr(owner), name): value for owner in owners for name, value in vars(owner).items()}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_a_mutant_leaves_the_app_as_it_found_it(mutant: Mutant) -> None:
    before = _attributes()
    with mutant.patch():
        pass
    after = _attributes()
    assert after.keys() == before.keys()
    assert [k for k in before if after[k] is not before[k]] == []


def test_every_mutant_is_named_once_and_aims_at_a_known_family() -> None:
    from sim.scenario import FAMILIES

    assert len(BY_NAME) == len(MUTANTS)
    assert all(m.family in FAMILIES for m in MUTANTS)


def test_the_revert_table_counts_its_rows_and_shows_what_was_not_caught_or_not_run() -> None:
    fix, ours, missed = (BY_NAME[n] for n in ("no-look-chain", "export-line-per-record", "far-look-kept"))
    found = {"no-look-chain": Result("no-look-chain", "storage", 3, 2, "t=1.0: queue work was not looked at"),
             "far-look-kept": Result("far-look-kept", "random", 300, None)}  # fmt: skip
    table = render([fix, ours, missed], found)
    assert "**1 of 3 defects caught**: 1 of 2 fixes put back, 0 of 1 defects of our making" in table
    rows = {line.split("`")[1]: line for line in table.splitlines() if line.startswith("| ") and "`" in line}
    assert "3 (`storage` 2)" in rows["no-look-chain"]
    assert "(alone)" in rows["no-look-chain"]
    assert "| not run | - | - |" in rows["export-line-per-record"]
    assert "a defect of our making" in rows["export-line-per-record"]
    assert "**not caught**" in rows["far-look-kept"]
    assert "- (300 `random`)" in rows["far-look-kept"]


def test_reliability_names_exactly_the_features_make_simulate_requires() -> None:
    """`make simulate` (`python -m sim --family all`) fails when a feature of `sim.platform.FEATURES` was reached by
    no seed; RELIABILITY.md lists those features, and the two lists must not drift apart."""
    text = (Path(__file__).parents[2] / "RELIABILITY.md").read_text()
    listed = text.split("reached by no seed:", 1)[1].split(".\n", 1)[0]
    assert sorted(re.findall(r"`([a-z-]+)`", listed)) == sorted(FEATURES)
