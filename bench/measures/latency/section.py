"""BENCHMARKS.md section 3: wake latency after idle, and where the app's wake time goes."""

from __future__ import annotations

from typing import Any

from bench.peers import LABELS
from bench.tools.results import SYSTEMS, ms, run_source


def latency(doc: dict[str, Any]) -> str:
    lat = doc["latency"]
    systems = lat["systems"]
    a_p99 = systems["a"]["first_item_s"].get("p99")
    rows = [
        "## 3. Wake latency after idle",
        "",
        run_source(doc),
        "",
        f"{systems['app']['submissions']} submissions of {lat['batch_items']} items each, at the same moments for "
        f"every system, after idle gaps drawn uniformly from {doc['config']['latency_gap_s'][0]:.0f}-"
        f"{doc['config']['latency_gap_s'][1]:.0f} s per lane ({doc['config']['latency_lanes']} independent instances "
        "of each peer, one queue each, so every back-off grows between its submissions). The app runs as deployed "
        "locally: the local function host with the real `function_app.py`, HTTP submit, Service Bus trigger. "
        "Latency runs from the submit's acknowledgement (the 202; for a peer, the last message stored) to the "
        "first item handled and to the batch completed, both observed by the same handler appending monotonic "
        "timestamps to a file (`bench/tools/handlers.py`). All milliseconds.",
        "",
        "| system | completed | first item p50 | p95 | p99 | max | batch done p50 | p95 | p99 | max | (a) p99 ÷ this |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in SYSTEMS:
        s = systems[k]
        first, done = s["first_item_s"], s["batch_done_s"]
        p99 = first.get("p99")
        vs = "-" if not p99 or a_p99 is None else f"{a_p99 / p99:,.0f}x"
        rows.append(
            f"| {LABELS[k]} | {s['completed']}/{s['submissions']} | {ms(first.get('p50'))} | {ms(first.get('p95'))} | "
            f"{ms(p99)} | {ms(first.get('max'))} | {ms(done.get('p50'))} | {ms(done.get('p95'))} | "
            f"{ms(done.get('p99'))} | {ms(done.get('max'))} | {vs} |"
        )
    rows += [
        "",
        "![latency distributions](bench/results/latest-latency.png)",
        "",
        "A peer's first item can be handled before its last message is stored (a poll that lands during the "
        "enqueue of its messages): hence any negative or near-zero figures of the peers, which only favour "
        "them.",
        "",
        host_note(lat),
        "",
    ]
    return "\n".join(rows)


def host_note(lat: dict[str, Any]) -> str:
    timeline = lat.get("app_host_timeline", {})
    gap, drain = timeline.get("delivery_gap_s", {}), timeline.get("drain_duration_s", {})
    if not gap.get("count"):
        return ""
    return (
        f"Where the app's wake time goes, from the host's console: `drain` starts a median {ms(gap['p50'])} ms "
        f"(max {ms(gap['max'])}) after `submit_batch` ends, and runs a median {ms(drain['p50'])} ms "
        f"(p99 {ms(drain['p99'])}) including its lease, receive, manifest read, handler, result write and delete. "
        "The first part is Service Bus delivery through the local function host, which, like the Azure "
        "Functions host's Service Bus extension, hands each trigger message over as it arrives (one message per "
        "receive call; asking the SDK for more makes it linger 0.2 s after the first for the rest). A negative "
        "gap is a drain that started before `submit_batch` had logged its own end: the trigger is published "
        "inside it."
    )
