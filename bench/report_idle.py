"""BENCHMARKS.md's idle figures per app with every source counted, from bench/results/idle_sources.json.

`python -m bench.idle_sources` writes the file (part of `make bench` and `make bench-platform`); a missing file is
said, not hidden.
"""

from __future__ import annotations

from bench.report_platform import load

TARGET = 0.1  # issue 13: an idle one-queue app at most 1/10 of the built-in trigger, all sources counted


def every(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes / 60:.0f} h" if minutes >= 60 else f"{minutes:.0f} min"


def section() -> str:
    doc = load("idle_sources.json")
    head = ["### Idle per app, every source counted (a model)", ""]
    if doc is None:
        return "\n".join([*head, "No model run recorded (`python -m bench.idle_sources`).", ""])
    rows = doc["rows"]
    out = [
        *head,
        "Section 4 counts each policy's own calls per queue. On Azure an idle app also pays for what the host and "
        "the platform do, and how long an instance lives decides most of it. `bench.idle_sources` adds up one "
        "idle day per app from every source we know, driving the fallback's real back-off policy (at its default "
        "settings) on the timer's schedule: the primary-host lock (renewed every 12 s while an instance runs), "
        "the timer's listener lock (every 30 s), a fresh instance's reads of its back-off state, the fallback's "
        "looks; for (a) its polls while an instance runs and the scale controller's probes of each queue (one "
        "GetQueueProperties per 10 s, assumed: the platform does not publish its cadence). On Flex Consumption "
        "an idle (a) app scales to zero; this app's timer wakes an instance at every tick, which then lingers "
        "(5 minutes assumed, 20 as the pessimistic case: not published either). Service Bus operations (the "
        "trigger's scale probes, doorbells) are not storage transactions and are not in these figures.",
        "",
        f"| plan | linger | queues | fallback timer | (a) per day | this app per day | ÷ (a) | at most {TARGET}? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r["c_over_a"] <= TARGET else "no"
        linger = every(r["linger_s"]) if r["plan"] != "Premium" else "-"
        out.append(
            f"| {r['plan']} | {linger} | {r['queues']} | every {every(r['schedule_s'])} | {r['a_total']:,} | "
            f"{r['c_total']:,} | {r['c_over_a']:.3f} | {met} |"
        )
    shipped = next(r for r in rows if r["plan"] != "Premium" and r["queues"] == 1 and r["schedule_s"] == 60)
    parts = ", ".join(f"{k} {v:,}" for k, v in shipped["c"].items())
    out += [
        "",
        f"As shipped (a one-minute timer), a one-queue app on Flex Consumption idles at {shipped['c_total']:,} "
        f"storage transactions a day ({parts}): {shipped['c_over_a']:.2f}x (a), because a timer that fires "
        "more often than the linger keeps an instance, and with it the host's locks, alive all day. The target "
        f"of {TARGET} is **not met** as shipped. Setting `FALLBACK_SCHEDULE` to the back-off ceiling (30 minutes) "
        "lets the instance go between ticks but, with each wake paying the locks for the whole linger, still "
        "misses it; every 4 hours meets it with a 5-minute linger and just misses with 20. The price is the "
        "fallback's bound: a chunk whose every doorbell, retry and watchdog was lost waits up to the timer's "
        "period instead of 30 minutes. `infra/main.bicep` takes the schedule as a parameter "
        "(`fallbackSchedule`); the default stays one minute until the linger is measured on Azure. On Premium "
        "an instance is always alive, so the host's locks are paid by both and the ratio is set by (a)'s polls "
        "and probes: about 0.6 for one queue, 0.05 for 20.",
        "",
    ]
    return "\n".join(out)
