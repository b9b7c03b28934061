"""BENCHMARKS.md's frame: the header (command, machine, load, the peers), the targets table, and how it is measured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.peers import LABELS
from bench.tools.results import PEERS, SYSTEMS, fmt, target_row


def header(doc: dict[str, Any]) -> str:
    return """# Benchmarks

queue-drain (push drain + fallback, default settings) beside four polling peers. Every figure below names the
command that measures it and the commit it was measured on; `python -m bench --report-only` rewrites this file from
the result files in `bench/results/`, measuring nothing. Times come from a shared 2-core machine and are noisy:
compare the ratios.
"""


def side_by_side(doc: dict[str, Any]) -> str:
    """The main run's headline figures, the app and every peer in one table."""
    f, tput = doc["summary"]["figures"], doc["throughput"]

    def row(label: str, cell: Callable[[str], str]) -> str:
        return f"| {label} | " + " | ".join(cell(k) for k in SYSTEMS) + " |"

    def p99_ms(k: str) -> str:
        p99 = f["first_item_p99_s"][k]
        return "-" if p99 is None else f"{p99 * 1000:,.0f}"

    return "\n".join(
        [
            "## The app and the peers side by side",
            "",
            "| | " + " | ".join(LABELS[k] for k in SYSTEMS) + " |",
            "|---|" + "---|" * len(SYSTEMS),
            row("storage transactions per 1,000 items (section 1)", lambda k: fmt(f["transactions_per_1000"][k])),
            row("drain items/s, no-op handler (section 2)", lambda k: fmt(f["items_per_s"][k], 0)),
            row("wake latency after idle, first item p99, ms (section 3)", p99_ms),
            row("idle storage transactions per queue per day (section 4)", lambda k: f"{f['idle_per_day'][k]:,}"),
            row("drain peak RSS, MB (section 6)", lambda k: fmt(tput[k]["peak_rss_mb"])),
            "",
            run_details(doc),
        ]
    )


def run_details(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    return f"""Measured together in one run on one Azurite and one Service Bus stand-in, so machine noise cancels out in
the ratios: `{doc["command"]}` (from a fresh clone; it runs `make setup` first), {doc["duration_s"] / 60:.1f}
minutes, started {doc["started_at"]}; {commits(m)}. Machine: {m["cpu"]}, {m["cores"]} cores, {m["memory_gib"]} GiB,
{m["os"]}, Python {m["python"]}, Node {m["node"]}, Azurite {m["azurite"]}. Load: the machine is shared with other
engineers' test suites. {load_line(m)} Azurite, the Service Bus stand-in, the function hosts, the peers and
the drain all share those {m["cores"]} cores. Sections 1-6 are from this run; every other section names its own
command, result file and commit.

Peers (in `bench/peers/`, each faithful to its documented algorithm):

| | what it is |
|---|---|
{peer_table()}
"""


def commits(m: dict[str, Any]) -> str:
    def one(commit: str | None, modified: bool) -> str:
        return f"`{(commit or '?')[:12]}`" + (" with uncommitted changes" if modified else "")

    end = one(m["commit"], m["tree_modified"])
    if "commit_at_start" not in m:
        return f"commit {end}"
    start = one(m["commit_at_start"], m["tree_modified_at_start"])
    if start == end:
        return f"commit {end}"
    return (
        f"commit {start} at the start and {end} at the end (the working tree is shared: other engineers "
        "committed during the run, so later phases ran newer code)"
    )


def load_line(m: dict[str, Any]) -> str:
    load = m.get("load_during_run") or {}
    if not load.get("samples"):
        return ""
    return (
        f"The 1-minute load average during the run, sampled every {load['every_s']:.0f} s: mean "
        f"{load['mean']:.2f}, max {load['max']:.2f} (these figures include the benchmark's own processes)."
    )


ALGORITHMS = {
    "a": "WebJobs SDK `QueueListener`: GetMessages 16, next batch at <= 8 in flight, back-off "
    "`100 ms + U(0.8,1.2)·2^(k-1)·100 ms` capped at 60 s, 10-min visibility, poison after 5 dequeues",
    "b": "GetMessages of 1; handle and delete; sleep 1 s when empty",
    "c": "GetMessages of 1; when empty sleep 1 s, 2 s, 4 s ... 60 s; reset on a message",
    "d": "GetMessages 32; `min(floor + (2^idle-1)·100 ms·U(0.8,1.2), 1 s)`; depth read per empty poll "
    "(`QueryState`); 10/50/100 dequeue tasks by depth",
}


def peer_table() -> str:
    return "\n".join(f"| {LABELS[k]} | {ALGORITHMS[k]} |" for k in PEERS)


def targets(doc: dict[str, Any], more: list[str]) -> str:
    """Every target with its figure, met or missed, and the command and commit that measured it: the main run's
    first, then `more`, the rows each other benchmark gives (`headline_targets`)."""
    rows = [
        "## Targets",
        "",
        "| target | figure | met | command | commit |",
        "|---|---|---|---|---|",
    ]
    for t in doc["summary"]["targets"]:
        figure = t["figure"]
        if "fraction" in t["target"] or "1/15" in t["target"] or "70%" in t["target"]:
            shown = "-" if figure is None else f"{figure:.3f}"
        else:
            shown = fmt(figure)
        rows.append(target_row(t["target"], shown, t["met"], doc["command"], "latest.json", doc))
    return "\n".join([*rows, *more]) + "\n"


def method(doc: dict[str, Any]) -> str:
    c = doc["config"]
    return f"""## How it is measured

- `make bench` (`python -m bench`) starts Azurite, the Service Bus stand-in, two local function hosts and one
  process per peer, each on free loopback ports, and stops each by its own pid. Sizes of this run: app backlog
  {c["app_backlog_items"]:,} items, peer backlog {c["peer_backlog_items"]:,} items drained in full and a
  {c.get("deep_backlog_items", 0):,}-item one drained {c.get("deep_window_s", 0):.0f} s per peer,
  {c["latency_lanes"]} lanes x {c["latency_per_lane"]} submissions of {c["latency_batch_items"]} items, real-time
  idle run {c["idle_real_s"] / 60:.1f} min. `make bench-quick` runs the same at small sizes (under 5 minutes) and
  writes `bench/results/quick.json`.
- Peers are real code against the real Azurite through the azure-storage-queue aio SDK; their polling loops take
  an injectable clock, so the same code runs in real time and on a simulated day. Transactions are counted by the
  app's own `TransactionCounter` policy (`raw_request_hook`) on every client.
- The other runs, each its own command and result file, each bounded in time (measured on this 2-core shared
  machine), all part of `make bench`:
  - `make bench-chunked` (`python -m bench.chunked`, about 9 minutes): peer (a') beside (a) and the app, and the
    app all in through the host, look chain counted -> `bench/results/chunked.json`;
  - `make bench-curves` (`python -m bench.curves`, about 2 minutes): one batch of 10^3 to 10^6 items, extended to
    10^7 -> `bench/results/curves.json`, `curves.png`;
  - `make bench-tenants` (`python -m bench.tenants`, about 15-20 minutes): 1, 100 and 1,000 tenant lanes ->
    `bench/results/tenants.json`; rerun it whenever the engine's lane bookkeeping changes;
  - `make bench-rounds` (`python -m bench.rounds --profile`, about 4 minutes on a quiet machine): the app, (a') and
    the raw loop in 5 interleaved rounds of 200,000 items, each side's CPU per message, and where the app's CPU goes
    -> `bench/results/rounds.json`, a line in `bench/results/cpu_history.json` (so does every `make bench` and
    `make bench-quick`); `--before DIR` drains another checkout's app in the same rounds (a change against its
    parent), `--spin N` runs N CPU-bound processes beside it;
  - `make bench-fairness-parts` (`python -m bench.fairness --items 1000000 --waits 200 --rounds 1 --no-rates
    --azurite-parts`, then the same with `--spin 2`: two CPU-bound processes beside it, started by the bench; about
    8 minutes) -> `bench/results/fairness-parts.json`, `fairness-parts-spin.json`;
  - `make bench-platform` (about 8 minutes): the platform model, the idle sources and two local hosts.
  `python -m bench --report-only` rewrites BENCHMARKS.md from every result file, measuring nothing.
- Logs, handler records and service data of each run are in `bench/results/runs/` (not committed).
"""
