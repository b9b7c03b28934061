"""BENCHMARKS.md's section on fairness between tenants and the handler limits, from bench/results/fairness.json
(`python -m bench.fairness`, part of `make bench`); a missing file is said, not hidden."""

from __future__ import annotations

import statistics
from typing import Any

from bench.measures.fairness.run import share_of_chunks
from bench.tools.results import load, section_start, target_row


def latency_cells(run: dict[str, Any]) -> str:
    found = run["b_latency_ms"]
    if not found.get("count"):
        return "- | - | -"
    return f"{found['p50']:,.0f} | {found['p99']:,.0f} | {found['max']:,.0f}"


SMALL = "fairness-300k.json"  # the same scenario on a backlog Azurite serves without saturating


def submit_p50_ms(doc: dict[str, Any], wait: float) -> float:
    """The median over rounds with lanes of B's own submit's p50: what the shared stack makes any request wait."""
    scenario = next(s for s in doc["scenarios"] if s["handler_wait_ms_per_chunk"] == wait)
    return statistics.median(pair["with_lanes"]["b_submit_ms"].get("p50", 0) for pair in scenario["rounds"])


def fairness_table(doc: dict[str, Any]) -> list[str]:
    rows = [
        "| handler | round | lanes | B's batches | B p50 ms | B p99 ms | B max ms | B p99 from request ms | "
        "B's submit p50 ms | A items/s | A drain s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario in doc["scenarios"]:
        wait = scenario["handler_wait_ms_per_chunk"]
        handler = "no-op" if not wait else f"waits {wait:g} ms a chunk"
        for n, pair in enumerate(scenario["rounds"]):
            for label, run in (("yes", pair["with_lanes"]), ("no (control)", pair["shared_lane"])):
                rows.append(
                    f"| {handler} | {n + 1} | {label} | {run['b_probes']} | {latency_cells(run)} | "
                    f"{run['b_latency_from_send_ms'].get('p99', 0):,.0f} | {run['b_submit_ms'].get('p50', 0):,.0f} | "
                    f"{run['a_items_per_s']:,.0f} | {run['a_seconds']:.1f} |"
                )
    return [*rows, ""]


def verdicts(doc: dict[str, Any]) -> list[str]:
    rows = []
    for scenario in doc["scenarios"]:
        wait = scenario["handler_wait_ms_per_chunk"]
        verdict = "met" if scenario["b_p99_met"] else "**missed**"
        drop = scenario["a_throughput_drop"]
        p99, control = scenario["b_p99_ms_median"], scenario["b_p99_ms_median_shared_lane"]
        chunks = statistics.median(share_of_chunks(pair["with_lanes"]) for pair in scenario["rounds"])
        rows.append(
            f"- {doc['a_items']:,} items, {'no-op handler' if not wait else f'handler waiting {wait:g} ms a chunk'}: "
            f"B's median p99 {p99:,.0f} ms with lanes (p50 {scenario['b_p50_ms_median']:,.0f} ms), "
            f"{control / max(1.0, p99):.0f}x better than without ({control:,.0f} ms); against the idle app's wake "
            f"target ({doc['b_p99_target_ms']:.0f} ms): {verdict}. A's median throughput with lanes is "
            f"{abs(drop) * 100:.1f}% {'lower' if drop >= 0 else 'higher'} than without; B's batches were "
            f"{scenario['b_share_of_items'] * 100:.2f}% of the items and {chunks * 100:.1f}% of the chunks."
        )
    return [*rows, ""]


def where_the_time_goes(doc: dict[str, Any], small: dict[str, Any] | None) -> list[str]:
    big_submit = submit_p50_ms(doc, 200.0)
    small_part = (
        f" At {small['a_items']:,} items B's submit takes a median {submit_p50_ms(small, 200.0):,.0f} ms beside the "
        f"waiting handler (against {big_submit:,.0f} ms at {doc['a_items']:,}), and B reaches the handler a median "
        f"{next(s for s in small['scenarios'] if s['handler_wait_ms_per_chunk'] == 200.0)['b_p50_ms_median']:,.0f} ms "
        "after its 202: the app's own part (the drainer lists the lanes at most every 50 ms and once per 4 "
        "messages, receives one page from the lane it finds newly marked, and takes the batch as committed from "
        "the mark, with no manifest read) is small; the p99 is set by the tail of a stack that two cores share."
        if small is not None
        else ""
    )
    return [
        "Where B's time goes, and why the 250 ms target is missed here: Azurite's cost per GetMessages grows with "
        "the queue's depth (measured on these machines: about 50 ms a call at 3,000 messages; A's "
        f"{doc['a_items']:,} items are {doc['a_items'] // 250:,} messages), so A's drain keeps the emulator, and "
        f"with it every request of B's, waiting: B's own 10-item submit takes a median {big_submit:,.0f} ms beside "
        "the waiting handler and "
        f"{submit_p50_ms(doc, 0.0):,.0f} ms beside the no-op one, before B's chunk has been looked for at all; with "
        "the no-op handler the host's one event loop is saturated by A's drain as well." + small_part + " Real "
        "Azure Storage does not slow with depth, and on Azure B's submit would be served by the front end and B's "
        "doorbell counted by the scale controller; neither can be shown here. What A loses is B's share of the "
        "handler, counted in chunks, not items: a chunk holds a place for as long as the handler takes, whatever its "
        "size, so B's 10-item chunks cost what A's 250-item ones do; the rounds' spread on this shared machine is "
        "as large as that share.",
        "",
    ]


def section() -> str:
    doc, head = section_start("fairness.json", "Fairness and handler limits", "python -m bench.fairness")
    if doc is None:
        return "\n".join(head)
    small = load(SMALL)
    rows = [
        *head,
        f"One local host (the real function_app.py, Service Bus trigger and all) at a time. Tenant A's "
        f"{doc['a_items']:,}-item batch drains (the issue's case; below it, the same at "
        f"{small['a_items'] if small else 300_000:,} items); meanwhile tenant B submits {doc['probe_items']} items "
        f"every {doc['probe_every_s']:g} s over HTTP. B's latency runs from its 202 (as the wake latency after "
        "idle is measured) to the handler's call on its items; the same from the request's start is given too. "
        "A's throughput is its items over its drain. Without lanes both go to the shared lane, as before issue 17. "
        "Two handlers: one that returns at once (the drain machinery alone saturates the host's one event loop: "
        "the worst case for a newcomer), and one that waits 200 ms per chunk as a call to a downstream service "
        "would. Each handler runs paired rounds, with and without lanes, in alternating order; every round is "
        "shown, and the verdicts use the medians. A latency below zero means the handler had B's items before the "
        "client had the 202 (a submit marks its lane before it rings the doorbell and answers).",
        "",
        *fairness_table(doc),
        *verdicts(doc),
    ]
    if small is not None:
        rows += [
            f"The same at {small['a_items']:,} items (`python -m bench.fairness --items {small['a_items']} "
            f"--no-rates --json bench/results/{SMALL}`, also in `make bench`):",
            "",
            *fairness_table(small),
            *verdicts(small),
        ]
    rows += where_the_time_goes(doc, small)
    rows += [
        "**Handler limit** (`HANDLER_ITEMS_PER_S`): a backlog drained by 1, 2 and 4 drainers (one host running that "
        "many drain executions, recruited by scale-out events), the handler's observed rate against the limit.",
        "",
        "| drainers | slots seen | limit items/s | observed items/s | observed ÷ limit | busiest second | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in doc["rate_limit"]:
        rows.append(
            f"| {run['drainers']} | {', '.join(map(str, run['drainer_slots_seen']))} | "
            f"{run['limit_items_per_s']:,.0f} | {run['observed_items_per_s']:,.0f} | "
            f"{run['observed_items_per_s'] / run['limit_items_per_s']:.2f} | {run['busiest_second_items']:,} | "
            f"{run['seconds']:.1f} |"
        )
    rows += [
        "",
        "Over a drain the rate stays at or under the limit: the drainers' claims never add up to more "
        "(`shared.engine.limits`), and a drainer that joins waits for room. In any one second it may pass the "
        "limit by up to one chunk per drainer, since each drainer's first chunk after a pause starts at once. "
        "With more "
        "drainers the observed rate falls below the limit while claims move toward their shares: a drainer that "
        "joins waits a count or two (a second each) for the others to give up room, which a drain of 12-16 s "
        "like these feels (4 drainers: about three quarters of the limit) and a longer one amortizes.",
        "",
    ]
    return "\n".join(rows)


def parts_note(doc: dict[str, Any], scenario: dict[str, Any]) -> str:
    """The split of a taken-apart run's p99 (round 1 with lanes) and the load it met, and for a missed target what
    it is missed by."""
    parts = (scenario["rounds"][0]["with_lanes"].get("taken_apart") or {}) if scenario.get("rounds") else {}
    app, azurite = parts.get("app_added_ms", {}).get("p99"), parts.get("azurite_path_ms", {}).get("p99")
    load = ((doc.get("machine") or {}).get("load_during_run") or {}).get("mean")
    if app is None or azurite is None:
        return ""
    return (
        f" (the app's part {app:,.0f} ms, Azurite's list and receive {azurite:,.0f} ms at p99"
        + (f"; load {load}" if load is not None else "")
        + ")"
        + ("" if scenario.get("b_p99_met") else ": B's work waits behind A's on the host's one event loop")
    )


def headline_targets() -> list[str]:
    """A newcomer's wake behind a big backlog, against the idle app's wake target, for the first screen's table."""
    rows = []
    for name, command in (
        ("fairness.json", "python -m bench.fairness"),
        ("fairness-parts.json", "make bench-fairness-parts"),
        ("fairness-parts-spin.json", "make bench-fairness-parts"),
    ):
        doc = load(name)
        for scenario in (doc or {}).get("scenarios", []):
            wait = scenario["handler_wait_ms_per_chunk"]
            handler = "no-op handler" if not wait else f"handler waiting {wait:g} ms a chunk"
            handler += ", taken apart" if name.startswith("fairness-parts") else ""
            if (doc or {}).get("spinners"):
                handler += f", {doc['spinners']} CPU-bound processes beside it"
            rows.append(
                target_row(
                    f"a newcomer behind {doc['a_items']:,} items ({handler}): p99 <= {doc['b_p99_target_ms']:,.0f} ms",
                    f"{scenario['b_p99_ms_median']:,.0f} ms" + parts_note(doc, scenario),
                    scenario["b_p99_met"],
                    command,
                    name,
                    doc,
                )
            )
    return rows
