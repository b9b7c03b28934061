"""BENCHMARKS.md's last section, the changes: the headline claims as `make bench` states them and as the runs that
answer a skeptic restate them (each naming its peer, backlog and command), then how some figures were reached. Read
from the result files; a claim whose file is missing is left out, and says so."""

from __future__ import annotations

from typing import Any

from bench.measures.idle_sources.section import every_minute
from bench.tools.results import fmt, load


def section(doc: dict[str, Any]) -> str:
    f = doc["summary"]["figures"]
    tput = doc["throughput"]
    app_items, a_items = tput["app"]["items"], tput["a"]["items"]
    rows = [
        "## Changes: how the figures moved",
        "",
        "The headline claims as `make bench` states them (sections 1-3), and as the runs that answer a skeptic "
        "restate them:",
        "",
        "| claim | as `make bench` states it (section 1-3) | restated | command |",
        "|---|---|---|---|",
    ]
    chunked = load("chunked.json")
    if chunked is not None:
        a2, allin, app2, a = chunked["a2"], chunked["app_all_in"], chunked["app"], chunked["a"]
        rows += [
            f"| transactions per item | {fmt(f['fewer_transactions_than_a']['app'], 0)}x fewer than (a) (the app on "
            f"{app_items:,} items, (a) on {a_items:,}, one item a message) | batching's, not the push drain's: (a') "
            f"fed the same 250-item chunks spends {fmt(a2['transactions_per_1000'], 2)} per 1,000 items, the app "
            f"{fmt(allin['transactions_per_1000'], 2)} all in with its look chain ({allin['items']:,} items each): "
            f"{fmt(allin['transactions_per_1000'] / a2['transactions_per_1000'], 2)}x (a')'s | `make bench-chunked` |",
            f"| drain rate, no-op handler | {fmt(f['items_per_s']['app'] / f['items_per_s']['a'], 0)}x (a)'s items/s "
            f"(the app on {app_items:,} items, (a) on {a_items:,}) | "
            f"{fmt(app2['items_per_s'] / a2['items_per_s'], 2)}x "
            f"(a')'s on the same {a2['items']:,} items ({fmt(app2['items_per_s'], 0)} against "
            f"{fmt(a2['items_per_s'], 0)}); (a') is {fmt(a2['items_per_s'] / a['items_per_s'], 0)}x (a): batching | "
            "`make bench-chunked` |",
        ]
        lat = chunked.get("latency")
        if lat:
            p99 = lat["systems"]["a2"]["first_item_s"].get("p99")
            rows.append(
                f"| wake latency after idle (p99, first item) | {fmt(f['first_item_p99_s']['app'] * 1000, 0)} ms "
                f"against (a)'s {fmt(f['first_item_p99_s']['a'], 1)} s | unchanged, and the push drain's: (a') waits "
                f"as (a) does, {fmt(p99, 1)} s | `make bench-chunked` |"
            )
    else:
        rows.append("| (a') | - | not measured (`make bench-chunked` writes bench/results/chunked.json) | |")
    rows += [*curve_claims(), *tenant_claims(), *fairness_claims(), "", *history()]
    return "\n".join(rows) + "\n"


def history() -> list[str]:
    """How figures above were reached, moved out of their sections so each section states what holds now."""
    out = ["How some figures were reached:", ""]
    sources = load("idle_sources.json")
    if sources is not None:
        minute = every_minute(sources)
        out.append(
            "- Idle per app: before the look chain the fallback timer ticked every minute, which kept an instance, "
            "and with it the host's locks, alive all day (with a 5-minute linger): "
            f"{minute['c_total']:,} transactions a day, {minute['c_over_a']:.2f}x (a) (`python -m bench.idle_sources`, "
            "the every-minute rows of Idle per app)."
        )
    out += [
        "- The message rate: each chunk used to write its own result blob; the drain now group-commits result "
        "records and releases its handler slot before settling, and the three costs of point 3 under The message "
        "rate are fixed (`make bench`).",
        "- A newcomer behind 1,000,000 items: p99 2,431 ms (the app's part 2,300 ms) before issue 30 item 5's "
        "fixes, the figure in Fairness at 1,000,000 items, taken apart now (`make bench-fairness-parts`); the "
        "stops on the way, each with what it measured and fixed: docs/design.md, \"How a newcomer's wait behind a "
        'deep backlog came down".',
        "",
    ]
    return out


def curve_claims() -> list[str]:
    doc = load("curves.json")
    if doc is None:
        return []
    point = max(doc["points"], key=lambda p: p["items"])
    e = point["export"]
    return [
        f"| cost and time against the batch's size | one backlog (200,000 items) | submit to drained at "
        f"{point['items']:,} items: {point['submit']['seconds']:,.0f} s submit, {point['drain']['seconds']:,.0f} s "
        f"drain, {fmt(point['transactions_per_1000'], 2)} transactions per 1,000 items; export "
        f"{fmt(e['items_per_s'], 0)} items/s, {fmt(e['peak_rss_growth_mb'])} MB; every curve's growth named | "
        "`make bench-curves` |"
    ]


def tenant_claims() -> list[str]:
    doc = load("tenants.json")
    if doc is None:
        return []
    idle = next(t for t in doc["targets"] if "6-hour" in t["target"])
    figure = "-" if idle["figure"] is None else f"{idle['figure']:.3g}"
    return [
        "| what a tenant lane costs | not measured | an empty lane adds "
        f"{figure} transactions per hour idle at the default "
        f"timer (target {idle['bound']:.3g}: {'met' if idle['met'] else 'missed'}); the rest in What tenant lanes "
        "cost | `make bench-tenants` |"
    ]


def fairness_claims() -> list[str]:
    doc = load("fairness-parts.json")
    if doc is None:
        return []
    parts = doc["scenarios"][0]["rounds"][0]["with_lanes"].get("taken_apart") or {}
    b, az, app = (parts.get(k, {}) for k in ("b_latency_ms", "azurite_path_ms", "app_added_ms"))
    if not b.get("count"):
        return []
    return [
        f"| a newcomer behind {doc['a_items']:,} items | p99 4.0 s, put down to Azurite slowing at depth, "
        f"unmeasured | p99 {b['p99']:,.0f} ms: Azurite's list and receive {az['p99']:,.0f} ms, the app's part "
        f"{app['p99']:,.0f} ms (p99 each, measured at the same moments) | `make bench-fairness-parts` |"
    ]
