"""BENCHMARKS.md's section on what tenant lanes cost (bench/results/tenants.json, `make bench-tenants`); a missing
file is said, not hidden."""

from __future__ import annotations

from typing import Any

from bench.tools import tenant_cost
from bench.tools.results import fmt, load, section_start, target_row

SETTLE_S_TEXT = "75 s"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f}"


def section() -> str:
    doc, rows = section_start("tenants.json", "What tenant lanes cost", "make bench-tenants")
    if doc is None:
        return "\n".join(rows)
    counts = doc["counts"]
    m = doc["machine"]
    backlog = counts[0]["draining"]["backlog_items"]
    rows += [
        "Each distinct tenant makes a lane: a queue per partition. On one Azurite and the local function host (the "
        f"real function_app.py), with {spoken([c['tenants'] for c in counts])} tenants that each submitted 10 items, "
        "drained, and then left "
        "their lanes empty (`make bench-tenants`, "
        f"{doc['duration_s'] / 60:.1f} minutes, commit `{str(m['commit'])[:12]}`, the machine's {m['cores']} cores "
        "shared). Transactions are the host's own (`/api/queues` counts them; the API's reads left out), per hour: "
        "idle over a window with the fallback timer every minute (the bench's setting), a day of due timer ticks (at "
        "the default 6-hour schedule every tick is due; one a day reads every lane's depth, the other three what a "
        "look of the chain reads), and while tenant t0000 "
        f"drains a {backlog:,}-item backlog with a newcomer tenant submitting 10 items every second (its wake "
        "latency from the 202 to the handler). `GET /api/queues` and the operator's page refresh (its three GETs at "
        "once, as dashboard.js makes them every 5 s) are timed and counted with the lanes empty (median of 3).",
        "",
        "| tenants | idle, per hour (timer every minute) | a day's due ticks: the thorough one / each other "
        "| idle per hour at the 6-hour default "
        "| draining: per hour | drain messages/s | newcomer wake p50 / p99 ms | `GET /api/queues` ms / transactions "
        "| page refresh ms / transactions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in counts:
        idle, busy, op = c["idle"], c["draining"], c["operator_idle"]
        wake = busy["newcomer_wake_ms"]
        rows.append(
            f"| {c['tenants']:,} | {fmt(idle['per_hour'], 0)} | {day_text(idle['due_day'])} | "
            f"{fmt(idle['per_hour_at_default_schedule'], 1)} | "
            f"{fmt(busy['per_hour'], 0)} | {fmt(busy['messages_per_s'], 0)} | "
            f"{fmt(wake.get('p50'), 0)} / {fmt(wake.get('p99'), 0)} | {ms(op['queues_seconds'])} / "
            f"{fmt(op['queues_transactions'], 0)} | {ms(op['page_seconds'])} / "
            f"{fmt(op['page_transactions'], 0)} |"
        )
    rows += ["", *unsettled(counts), *per_lane(counts), *targets(doc)]
    return "\n".join(rows) + "\n"


def unsettled(counts: list[dict[str, Any]]) -> list[str]:
    """Say so where the idle window still held drain executions (receives in it): not a settled idle."""
    notes = []
    for c in counts:
        found = c["idle"]["transactions"]
        if found.get("queue.GetMessages"):
            sweeps = found["queue.GetMessages"] + found.get("queue.PeekMessages", 0)
            per_execution = sweeps / max(1, found.get("blob.LeaseBlob.Acquire", 1))
            waited = (
                f"{c['settled_after_s']:,.0f} s (the host quiet by then, or the wait's limit)"
                if "settled_after_s" in c
                else SETTLE_S_TEXT
            )
            notes.append(
                f"**At {c['tenants']:,} tenants the idle window was not idle**: it held drain executions "
                f"(GetMessages {found['queue.GetMessages']:,}, PeekMessages {found.get('queue.PeekMessages', 0):,}, "
                f"lease acquisitions {found.get('blob.LeaseBlob.Acquire', 0):,}) {waited} after the last of the "
                f"lanes' items was handled, most likely the tail of the {c['tenants']:,} submits' doorbells (the host "
                "takes a few at a time); each execution receives from and peeks every lane, empty or not: about "
                f"{per_execution:,.0f} "
                "transactions per execution at this many lanes. That is a finding about lanes in itself (a burst of "
                "new tenants costs a lane sweep per doorbell), but the row's idle figure with the timer every minute "
                "is not a settled idle."
                + (
                    ""
                    if "settled_after_s" in c
                    else " `bench.tenants` now waits until the host is quiet before its idle window (`settle`); "
                    "this run predates that wait."
                )
            )
    return [*notes, ""] if notes else []


def spoken(numbers: list[int]) -> str:
    """1, 100, 1,000 and 2,000."""
    text = [f"{n:,}" for n in numbers]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " and " + text[-1]


def day_text(day: dict[str, dict[str, int]]) -> str:
    thorough, light = day["thorough"], day["light"]
    return f"{sum(thorough.values()):,} ({ops(thorough)}) / {sum(light.values()):,} ({ops(light)})"


def ops(found: dict[str, int]) -> str:
    return ", ".join(f"{k.split('.', 1)[1]} {v:,}" for k, v in found.items()) or "none"


def per_lane(counts: list[dict[str, Any]]) -> list[str]:
    def slope(value: Any) -> str:
        found = tenant_cost.per_lane({c["tenants"]: float(value(c)) for c in counts})
        return "-" if found is None else f"{found:,.3g}"

    return [
        "What each lane adds (the slope between the fewest and the most tenants measured):",
        "",
        f"- idle, per lane per hour: {slope(lambda c: c['idle']['per_hour'])} with the timer every minute; "
        f"{slope(lambda c: c['idle']['per_hour_at_default_schedule'])} at the 6-hour default; the day's thorough "
        f"tick reads {slope(lambda c: sum(c['idle']['due_day']['thorough'].values()))} more per lane, the others "
        f"{slope(lambda c: sum(c['idle']['due_day']['light'].values()))} (`shared/watch/inspect.py` `inspect`: "
        "thorough, one GetQueueMetadata per lane; otherwise a listing and the quiet record, and a depth read only "
        "for a lane not recorded quiet);",
        f"- while one tenant drains, per lane per hour: {slope(lambda c: c['draining']['per_hour'])};",
        f"- `GET /api/queues`: {slope(lambda c: c['operator_idle']['queues_transactions'])} transactions and "
        f"{slope(lambda c: c['operator_idle']['queues_seconds'] * 1000)} ms per lane "
        "(`shared/ops/reports.py` `read_queue_status`: one listing and the quiet record, and a depth read only for a "
        "lane not recorded quiet); the page refresh, which includes "
        f"it: {slope(lambda c: c['operator_idle']['page_transactions'])} transactions per lane, every 5 s "
        "while the page is open;",
        f"- the drain's message rate and a newcomer's wake latency at {counts[-1]['tenants']:,} tenants against "
        f"{counts[0]['tenants']:,}: "
        f"{ratio(counts, lambda c: c['draining']['messages_per_s'])} and "
        f"{ratio(counts, lambda c: c['draining']['newcomer_wake_ms'].get('p99'))} (p99).",
        "",
    ]


def ratio(counts: list[dict[str, Any]], value: Any) -> str:
    low, high = value(counts[0]), value(counts[-1])
    return "-" if not low or high is None else f"{high / low:.2f}x"


def targets(doc: dict[str, Any]) -> list[str]:
    rows = [
        f"**Target: a lane that has been empty for a while costs nothing** (at most {doc['lane_target_per_hour']:.3g} "
        "transactions per lane per hour, at most one a day, idle or while another tenant drains; a slope below 0 is "
        "the noise of one run per count, the drain's own transactions varying with its speed):",
        "",
        "| target | figure (per lane per hour) | met |",
        "|---|---|---|",
    ]
    for t in doc["targets"]:
        figure = "-" if t["figure"] is None else f"{t['figure']:.3g}"
        rows.append(f"| {t['target']} | {figure} | {'yes' if t['met'] else '**no**'} |")
    missed = [t for t in doc["targets"] if not t["met"]]
    rows += [
        "",
        "Missed on this code where the table says so: every due look (the timer's, and the look chain's while any "
        "lane holds work) reads the depth of every lane, empty for hours or not, and so do `GET /api/queues` and the "
        "page. Meeting the target is a change to the engine's lane bookkeeping (`shared/engine`, `shared/watch`: "
        "owned by the engine branch working on what lanes cost), not to the benchmark; **rerun `make bench-tenants` "
        "after it lands**."
        if missed
        else "Met on this code, in transactions. Not in time: the drain's message rate falls and a newcomer's wait "
        "grows with the lanes (the ratios above), since a draining drainer lists every lane (one ListQueues call "
        "for up to 5,000, but each entry parsed on the host's one event loop) up to 20 times a second to find new "
        "work. Rerun `make bench-tenants` whenever the engine's lane bookkeeping changes.",
        "",
    ]
    return rows


def headline_targets() -> list[str]:
    """The lane targets for the first screen's table."""
    doc = load("tenants.json")
    if doc is None:
        return []
    return [
        target_row(
            t["target"], f"{t['figure']:.3g} per lane per hour", t["met"], "make bench-tenants", "tenants.json", doc
        )
        for t in doc["targets"]
    ]
