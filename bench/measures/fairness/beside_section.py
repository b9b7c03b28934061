"""BENCHMARKS.md's newcomer's wait, a change against its parent in the same run (bench/results/fairness-change.json,
`python -m bench.fairness --before DIR --json bench/results/fairness-change.json`); a missing file is said."""

from __future__ import annotations

from bench.measures.fairness.beside import AFTER, BEFORE
from bench.tools.results import fmt, section_start

NAME = "fairness-change.json"
# Issue 42, target 3: what this run compared (said under its table while the file holds that run).
TRIED = [
    "**What was tried for a newcomer's wait (issue 42, target 3).** B's batch used to wait for the drainer's next lane "
    "listing (the watcher's cadence, a ListQueues answered on the event loop A's drain keeps busy, and now and then a "
    "second listing when one began before B's commit mark). The change measured here hands the mark a submit writes "
    "to the drainer at work on its partition in the same process (`Services.lane_news`, `LaneWatch.heard`), so the "
    "express page starts before the submit has rung its doorbell: B's p50 falls below 0 (the handler is called "
    "before the 202 is back) and its p99 fell in every round. It was measured at 200,000 items, not the target's "
    "1,000,000: at the load of that hour (12-15 on the 2 cores) a 1,000,000-item round did not finish (the drain's "
    "function timed out twice at 5 minutes), so the target's own figure is still to take on a quieter machine. What "
    "is left of B's wait at this load: its express receive and its handler call behind A's work on the same loop. A "
    "second worker process would not help while one drainer serves all of a partition's lanes, and the local host "
    "does not run one (see above).",
]

LEFT_OUT = (
    "What these figures leave out: they are local (Azurite and the Service Bus stand-in on one machine, a warm host, "
    "no cold start, no scale controller, no real Service Bus delivery latency, no host lock renewals across "
    "instances), and the hand-off only works where B's submit lands in the process that drains its partition; on "
    "Azure a submit answered by another instance leaves B to the lane listing, as before."
)


def short(commit: str | None) -> str:
    return f"`{(commit or '?')[:12]}`"


def section() -> str:
    title = "A newcomer's wait: a change against its parent, in the same run"
    doc, rows = section_start(NAME, title, "python -m bench.fairness --before DIR")
    if doc is None:
        return "\n".join(rows)
    machine = doc.get("machine") or {}
    load = machine.get("load_during_run") or {}
    commits = {AFTER: short(machine.get("commit")), BEFORE: short(doc.get("before_commit"))}
    scenario = doc["scenarios"][0]
    spun = f", with {doc['spinners']} CPU-bound processes the bench started beside it" if doc.get("spinners") else ""
    rows += [
        f"The run: `{doc.get('command', '')}`. Each round drains tenant A's {doc['a_items']:,}-item batch with lanes "
        f"twice on one Azurite and Service Bus stand-in (handler waiting {scenario['handler_wait_ms_per_chunk']:g} ms "
        f"a chunk), once in a host running {commits[AFTER]}'s app and once in a host running {commits[BEFORE]}'s (its "
        "parent), alternating which goes first; meanwhile tenant B submits 10 items every "
        f"{doc['probe_every_s']:g} s over HTTP, and B's wait runs from its 202 to the handler's call on its items, as "
        "in Fairness and handler limits. The app's part is B's wait less Azurite's lane listing and receive timed at "
        "the same moment (as in Fairness at 1,000,000 items, taken apart; a side that lists no lane for B still has "
        f"the listing subtracted). The 1-minute load average during the run: mean {load.get('mean')}, max "
        f"{load.get('max')}{spun}. All milliseconds.",
        "",
        "| round | side | commit | B waits p50 | p99 | max | the app's part p99 | A items/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, one in enumerate(scenario["rounds"], 1):
        for side in one["order"]:
            f = one[side]
            rows.append(
                f"| {n} | {side} | {commits[side]} | {fmt(f['b_p50_ms'], 0)} | {fmt(f['b_p99_ms'], 0)} | "
                f"{fmt(f['b_max_ms'], 0)} | {fmt(f['app_part_p99_ms'], 0)} | {fmt(f['a_items_per_s'], 0)} |"
            )
    summary = scenario["summary"]
    medians, ratios = summary["medians"], summary["after_over_before"]
    rows += [
        "",
        f"Medians over the rounds, after / before: B's p99 {fmt(medians[AFTER]['b_p99_ms'], 0)} / "
        f"{fmt(medians[BEFORE]['b_p99_ms'], 0)} ms, the app's part p99 {fmt(medians[AFTER]['app_part_p99_ms'], 0)} / "
        f"{fmt(medians[BEFORE]['app_part_p99_ms'], 0)} ms, A {fmt(medians[AFTER]['a_items_per_s'], 0)} / "
        f"{fmt(medians[BEFORE]['a_items_per_s'], 0)} items/s. Round by round, after over before: B's p99 "
        f"{ratios_text(ratios['b_p99_ms'])}, the app's part p99 {ratios_text(ratios['app_part_p99_ms'])}, A's rate "
        f"{ratios_text(ratios['a_items_per_s'])}. {LEFT_OUT}",
        "",
    ]
    rows += [*TRIED, ""] if doc.get("before_commit") == "8a76cae" else []
    return "\n".join(rows)


def ratios_text(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values) or "-"
