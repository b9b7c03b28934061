"""BENCHMARKS.md's idle figures per app with every source counted, from bench/results/idle_sources.json.

`python -m bench.idle_sources` writes the file (part of `make bench` and `make bench-platform`); a missing file is
said, not hidden.
"""

from __future__ import annotations

from typing import Any

from bench.measures.idle_sources.run import TARGET
from bench.tools.results import load, source


def every(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes / 60:.0f} h" if minutes >= 60 else f"{minutes:.0f} min"


def short(seconds: float) -> str:
    return every(seconds) if seconds >= 60 else f"{seconds:.0f} s"


def every_minute(doc: dict[str, Any]) -> dict[str, Any]:
    """The one-queue Flex Consumption row with the timer every minute and a 5-minute linger: the app before the
    look chain."""
    return next(
        r
        for r in doc["rows"]
        if r["plan"] != "Premium" and r["queues"] == 1 and r["schedule_s"] == 60 and r["linger_s"] == 300.0
    )


def section() -> str:
    doc = load("idle_sources.json")
    head = ["### Idle per app, every source counted (a model)", ""]
    if doc is None:
        return "\n".join([*head, "No model run recorded (`python -m bench.idle_sources`).", ""])
    rows = doc["rows"]
    out = [
        *head,
        source("python -m bench.idle_sources", "idle_sources.json", doc),
        "",
        "Section 4 counts each policy's own calls per queue. On Azure an idle app also pays for what the host and "
        "the platform do, and how long an instance lives decides most of it. `bench.idle_sources` adds up one "
        "idle day per app from every source we know, driving the fallback's real back-off policy (at its default "
        "settings) on the timer's schedule: the primary-host lock (4 calls to take, renewed every 12 s while an "
        "instance runs, 1 to release), the timer's listener lock (2 to take, every 30 s, 1 to release), the "
        "host's keys read at each start (each key blob is two calls; on Flex Consumption a sync 30 s after start "
        "reads the host keys again, every HTTP function's keys and a hash blob: 25 calls with this app's 10 HTTP "
        "functions, fewer with fewer), the package download on each Flex start (one read assumed), a fresh "
        "instance's reads of its back-off state, the fallback's looks, and the look chain's last look after the "
        "last work (the chain runs only while a queue holds messages); for (a) its polls while an instance runs "
        "and the scale controller's probes of each queue (one GetQueueProperties per 10 s in the main table; the "
        "platform does not publish its cadence). On Flex Consumption an idle (a) app scales to zero; this app's timer "
        "wakes an instance at every tick, which then lingers (not published either: 30 s, which a Microsoft "
        "product manager speaks of, 5 minutes, and 20 minutes). Service Bus operations (the trigger's scale "
        "probes, doorbells, the chain's scheduled looks) are not storage transactions and are not in these figures.",
        "",
        f"| plan | linger | queues | fallback timer | (a) per day | this app per day | ÷ (a) | at most {TARGET}? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r["c_over_a"] <= TARGET else "no"
        linger = short(r["linger_s"]) if r["plan"] != "Premium" else "-"
        timer = f"every {every(r['schedule_s'])}" + (" (default)" if r.get("shipped") else "")
        out.append(
            f"| {r['plan']} | {linger} | {r['queues']} | {timer} | {r['a_total']:,} | "
            f"{r['c_total']:,} | {r['c_over_a']:.3f} | {met} |"
        )
    flex = [r for r in rows if r["plan"] != "Premium" and r["queues"] == 1 and r.get("shipped")]
    shipped = next(r for r in flex if r["linger_s"] == 300.0)
    worst = max(flex, key=lambda r: r["linger_s"])

    parts = ", ".join(f"{k} {v:,}" for k, v in shipped["c"].items())
    premium = [r for r in rows if r["plan"] == "Premium" and r.get("shipped")]
    one, twenty = (next(r for r in premium if r["queues"] == n) for n in (1, 20))
    host_floor = one["c"]["primary-host lock"] / one["a_total"]
    met = "met" if max(r["c_over_a"] for r in flex) <= TARGET else "**not met**"
    out += [
        "",
        f"As shipped (the timer every {every(doc['shipped_schedule_s'])}, the look chain between ticks), a "
        f"one-queue app on Flex Consumption idles at {shipped['c_total']:,} storage transactions a day with a "
        f"{every(shipped['linger_s'])} linger ({parts}): {shipped['c_over_a']:.3f}x (a); "
        f"{worst['c_total']:,} ({worst['c_over_a']:.3f}x) with a {every(worst['linger_s'])} linger. With the "
        f"scale controller probing every 10 s the target of {TARGET} is {met}, and holds while an idle instance "
        f"lingers up to {doc['break_even_linger_s'] / 60:.0f} minutes (the range below for other probe "
        "cadences). What the period of hours does not give up: a queue that holds messages is "
        "looked at within the back-off interval (the floor, 1 minute, after work arrives; at most the ceiling, "
        "30 minutes, while messages wait), by looks its work scheduled on Service Bus (`shared.watch.lookout`), and "
        "an empty queue has nothing to look for. The timer remains the net for the case where Service Bus "
        "cannot carry the look itself (unreachable when the work arrived, and the process that accepted it "
        "died before it answered): then the work waits for the next tick, or for the next submit to that "
        "queue, which arms the chain. On Premium an instance is always alive, so the host's own locks are paid "
        f"by both; the host lock alone is {host_floor:.2f}x of (a) for one queue, so no fallback schedule can "
        f"reach the target there ({one['c_over_a']:.2f}x for one queue, {twenty['c_over_a']:.2f}x for 20).",
        "",
    ]
    out += range_part(doc)
    return "\n".join(out)


def range_part(doc: dict[str, object]) -> list[str]:
    """The shipped schedule on Flex Consumption over the values nobody publishes: linger x probe cadence."""
    rows = doc.get("range")
    if not isinstance(rows, list) or not rows:
        return []
    out = [
        "**Over what is not published.** The shipped schedule on Flex Consumption, for every idle-instance linger "
        "and scale-controller probe cadence in the range:",
        "",
        "| queues | linger | probe every | (a) per day | this app per day | ÷ (a) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['queues']} | {short(r['linger_s'])} "
            f"| {r['probe_s']:.0f} s | {r['a_total']:,} | {r['c_total']:,} | {r['c_over_a']:.3f} |"
        )
    one = [r for r in rows if r["queues"] == 1]
    twenty = [r for r in rows if r["queues"] != 1]
    lo, hi = min(one, key=lambda r: r["c_over_a"]), max(one, key=lambda r: r["c_over_a"])
    even = doc.get("break_even_linger_s_by_probe")
    evens = (
        "; ".join(
            f"probes every {float(p):.0f} s: "
            + (f"up to a {float(v) / 60:.0f}-minute linger" if float(v) > 0 else "at no linger of a minute or more")
            for p, v in even.items()
        )
        if isinstance(even, dict)
        else "-"
    )
    out += [
        "",
        f"One queue: from {lo['c_over_a']:.3f}x to {hi['c_over_a']:.3f}x (a); 20 queues: from "
        f"{min(r['c_over_a'] for r in twenty):.3f}x to {max(r['c_over_a'] for r in twenty):.3f}x. The target of "
        f"{TARGET} for one queue holds with {evens}. What holds across the whole range: an idle app costs less "
        f"than the built-in trigger's (at most {hi['c_over_a']:.2f}x for one queue), and with 20 queues under "
        f'{TARGET}. What does not: "about 1/50" for one queue, which needs both a short linger and probes '
        "every 10 s.",
        "",
    ]
    return out
